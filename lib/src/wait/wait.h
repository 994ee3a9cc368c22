/* SPDX-License-Identifier: MIT */
/*
 * The wait concern: poll, ppoll, select, pselect (poll.c), epoll_create and
 * epoll_ctl (epoll.c), the epoll_wait family (epoll_wait.c).
 */
#ifndef FREEFLOW_WAIT_H
#define FREEFLOW_WAIT_H

#include "core/core.h"

/* ---- epoll.c (table lock held) ---- */
void ff_epoll_arm_pending(int fd, struct ff_conn *c);

#endif
