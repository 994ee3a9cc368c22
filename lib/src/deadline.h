/* SPDX-License-Identifier: MIT */
/*
 * The library's clock (CLOCK_MONOTONIC) and deadlines, so that a wait that
 * wakes for nothing and sleeps again keeps its bound instead of starting it
 * over, and the one bounded poll of a single fd.
 */
#ifndef FREEFLOW_DEADLINE_H
#define FREEFLOW_DEADLINE_H

#include <limits.h>
#include <stdint.h>
#include <time.h>

static inline int64_t ff_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline int64_t ff_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Wait for ev on fd until end_ms (ff_now_ms) through libc's poll: 1 ready
 * (or HUP/ERR: the next call on fd reports it), 0 the time is up, or
 * -errno; EINTR is retried.
 */
int ff_poll_until(int fd, short ev, int64_t end_ms);

/*
 * Whether a blocking call a signal interrupted would go on by itself: every
 * handler that could have interrupted this thread asked for SA_RESTART
 * (poll() does not say which signal it was).
 */
int ff_signal_restarts(void);

/* A deadline in ns: CLOCK_MONOTONIC nanoseconds, or FF_FOREVER. */
#define FF_FOREVER		INT64_MAX

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
