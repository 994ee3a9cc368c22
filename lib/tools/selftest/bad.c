/* SPDX-License-Identifier: MIT */
/*
 * check-layers self-test: a lower concern calling up (into top.c) and
 * calling an exported wrapper by its libc name: both must be reported.
 */
#include <unistd.h>

int ff_selftest_top(int x);
int ff_selftest_bad(int fd);

int ff_selftest_bad(int fd)
{
	return ff_selftest_top(fd) + close(fd);
}
