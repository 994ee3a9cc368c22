/* SPDX-License-Identifier: MIT */
/*
 * Shared by poll.c and epoll.c: the spin's cadence of looking at ordinary
 * fds; and the deadlines (deadline.h).
 */
#ifndef FREEFLOW_READINESS_H
#define FREEFLOW_READINESS_H

#include "deadline.h"

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

#endif
