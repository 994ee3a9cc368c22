/* SPDX-License-Identifier: MIT */
/* check-layers self-test: a function of a lower concern (core: its directory). */
int ff_selftest_low(int x);

int ff_selftest_low(int x)
{
	return x + 1;
}
