/* SPDX-License-Identifier: MIT */
/* check-layers self-test: the higher concern's header (its directory names its concern). */
int ff_selftest_top(int x);
