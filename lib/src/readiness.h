/* SPDX-License-Identifier: MIT */
/*
 * Shared by poll.c and epoll.c: deadlines, so that a wait that wakes for
 * nothing and sleeps again keeps the program's timeout instead of
 * starting it over, and the spin's cadence of looking at ordinary fds.
 */
#ifndef FREEFLOW_READINESS_H
#define FREEFLOW_READINESS_H

#include <limits.h>
#include <stdint.h>
#include <time.h>

/*
 * While spinning on shared memory, the kernel is asked about the other fds
 * of the call once every this many spin rounds (a few microseconds), so an
 * ordinary fd that becomes ready ends the spin too.
 */
#define FF_SPIN_KERNEL_EVERY	128u
/*
 * epoll: a call that finds shm events, or is about to spin, does not ask
 * the kernel again if this set's kernel events were asked for less than
 * this long ago (by any call, or by the spin). Events of ordinary fds wait
 * at most about this long behind busy shm connections, and a ping-pong on
 * shm makes no system call per message.
 */
#define FF_KERNEL_FRESH_NS	10000

/* A deadline: CLOCK_MONOTONIC nanoseconds, or FF_FOREVER. */
#define FF_FOREVER		INT64_MAX

static inline int64_t ff_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ts NULL: forever. The caller has checked ts is valid (ff_ts_valid). */
static inline int64_t ff_deadline_ts(const struct timespec *ts)
{
	if (!ts)
		return FF_FOREVER;
	if (ts->tv_sec > INT64_MAX / 2 / 1000000000)
		return FF_FOREVER;	/* centuries: as good as forever */
	return ff_now_ns() + (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

/* A poll()/epoll_wait() timeout: negative waits forever. */
static inline int64_t ff_deadline_ms(int ms)
{
	return ms < 0 ? FF_FOREVER : ff_now_ns() + (int64_t)ms * 1000000;
}

/* What the kernel itself would refuse with EINVAL: let it say so. */
static inline int ff_ts_valid(const struct timespec *ts)
{
	return !ts || (ts->tv_sec >= 0 && ts->tv_nsec >= 0 && ts->tv_nsec < 1000000000);
}

static inline int64_t ff_left_ns(int64_t end)
{
	int64_t now;

	if (end == FF_FOREVER)
		return FF_FOREVER;
	now = ff_now_ns();
	return end > now ? end - now : 0;
}

/* The time left as a timespec (NULL: forever). */
static inline const struct timespec *ff_left_ts(int64_t end, struct timespec *ts)
{
	int64_t left = ff_left_ns(end);

	if (left == FF_FOREVER)
		return NULL;
	ts->tv_sec = left / 1000000000;
	ts->tv_nsec = left % 1000000000;
	return ts;
}

/* The time left in ms, rounded up so that a wait never ends before the deadline; -1: forever. */
static inline int ff_left_ms(int64_t end)
{
	int64_t left = ff_left_ns(end);

	if (left == FF_FOREVER)
		return -1;
	left = (left + 999999) / 1000000;
	return left > INT_MAX ? INT_MAX : (int)left;
}

#endif
