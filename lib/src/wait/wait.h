/* SPDX-License-Identifier: MIT */
/*
 * The wait concern: poll, ppoll, select, pselect (wait/poll.c), epoll_create and
 * epoll_ctl (wait/epoll.c), the epoll_wait family (wait/epoll_wait.c).
 */
#ifndef FREEFLOW_WAIT_H
#define FREEFLOW_WAIT_H

#include "core/core.h"

/* ---- wait/epoll.c (table lock held) ---- */
void ff_epoll_arm_pending(int fd, struct ff_conn *c);

#endif
