/* SPDX-License-Identifier: MIT */
/* check-layers self-test: a lower concern's function (tools/selftest/layers.flat). */
int ff_selftest_low(int x);

int ff_selftest_low(int x)
{
	return x + 1;
}
