/* SPDX-License-Identifier: MIT */
/*
 * The calls concern: the wrappers of socket, connect, accept, close, dup,
 * fcntl... (calls/socket.c), the data calls (calls/io.c), getsockopt and
 * setsockopt (sockopt.c), the routes around the wrappers (routes.c), and
 * the verbs device's command file (uverbs.c), and rdma_cm's (rdmacm.c).
 */
#ifndef FREEFLOW_CALLS_H
#define FREEFLOW_CALLS_H

#include "core/core.h"

/* ---- calls/socket.c: what every close route shares ---- */

/*
 * Table lock held: fd is about to be closed (or replaced); its slot is
 * cleared. Returns its conn if that was its last fd, for ff_conn_closed.
 */
struct ff_conn *ff_fd_forget(int fd);
/* No lock held: the last fd of c is gone (NULL: nothing); tells the agent, frees c. */
void ff_conn_closed(struct ff_conn *c);
/*
 * Something the shim cannot follow will use fd's socket as it is: a
 * connection without its decision (or not connected yet) stays on the
 * overlay, as a dup before the decision makes it. why: for FREEFLOW_DEBUG.
 */
void ff_fd_keep_overlay(int fd, const char *why);

/* ---- routes.c: syscall(), close_range, stdio, io_uring ---- */

/*
 * fd is about to be used by a route the shim cannot serve on shm (the
 * kernel or libc's internal I/O acts on it): decided or kept on the
 * overlay, and moved down if on shm.
 */
void ff_fd_to_kernel(int fd, const char *why);
/* Move every shm connection down, and every later one (ff_shm_avoided). */
void ff_shm_avoid(const char *why);
/* Ring fd (FF_FD_RING) is being closed: the shim's mapping of it goes. */
void ff_ring_closed(int fd);
/*
 * The n bytes at src, which a system call's argument names, into dst, read
 * as the kernel reads them: an address the program got wrong fails the
 * read (-EFAULT; the kernel then fails the call so) instead of faulting in
 * the library. 0 or -errno.
 */
int ff_user_read(void *dst, const void *src, size_t n);

/* ---- uverbs.c: the verbs device's command file ---- */

/*
 * A write of n bytes at buf to a uverbs fd (FF_FD_UVERBS): n if the
 * library answered it as the kernel would (CREATE_COMP_CHANNEL), -errno
 * if that failed, 0 if it is not a command the library answers.
 */
ssize_t ff_uverbs_write(const void *buf, size_t n);

/* ---- rdmacm.c: rdma_cm's command file ---- */

/* fd was just opened as /dev/infiniband/rdma_cm: it becomes an event channel. */
void ff_rdmacm_opened(int fd);
/* fd, an event channel, is being closed: its ids go with it, as the kernel's. */
void ff_rdmacm_closed(int fd);
/* A write of n bytes at buf to an rdma_cm fd (FF_FD_RDMACM): n, or -errno as the kernel's. */
ssize_t ff_rdmacm_write(int fd, const void *buf, size_t n);

#endif
