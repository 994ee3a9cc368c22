/* SPDX-License-Identifier: MIT */
/* check-layers self-test: a higher concern calling down, which is allowed. */
#include "calls/top.h"

int ff_selftest_low(int x);

int ff_selftest_top(int x)
{
	return ff_selftest_low(x) * 2;
}
