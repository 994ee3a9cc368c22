/* SPDX-License-Identifier: MIT */
/*
 * check-layers self-test: a lower concern including a higher one's header,
 * calling up (into top.c) and calling an exported wrapper by its libc name:
 * all three must be reported.
 */
#include <unistd.h>

#include "calls/top.h"

int ff_selftest_bad(int fd);

int ff_selftest_bad(int fd)
{
	return ff_selftest_top(fd) + close(fd);
}
