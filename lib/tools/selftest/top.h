/* SPDX-License-Identifier: MIT */
/* check-layers self-test: the higher concern's header (tools/selftest/layers.flat). */
int ff_selftest_top(int x);
