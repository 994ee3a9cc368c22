/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory channel (docs/SHM.md is the contract: layout, waking,
 * end of stream, moving down). Internal to the shim, like shim.h.
 *
 * Conventions as in shim.h: 0 or -errno, errno untouched. A conn with
 * c->shm set has FF_FD_SHM in the flags of every slot that refers to it;
 * the data path tests that bit with one relaxed load.
 */
#ifndef FREEFLOW_SHM_H
#define FREEFLOW_SHM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "shim.h"

/* Layout constants (docs/SHM.md, "Layout"). */
#define FF_SHM_MAGIC		0x4d534646u
#define FF_SHM_VERSION		1u
#define FF_SHM_HDR_SIZE		4096u
#define FF_SHM_RING_MIN		4096u
#define FF_SHM_RING_MAX		(16u << 20)
#define FF_SHM_OFF_SWITCH_BY	64u
#define FF_SHM_OFF_CTL0		1024u
#define FF_SHM_OFF_CTL1		1536u
/* Control block field offsets. */
#define FF_SHM_CTL_HEAD		0u
#define FF_SHM_CTL_TAIL		64u
#define FF_SHM_CTL_CONS_WAIT	128u
#define FF_SHM_CTL_PROD_WAIT	192u
#define FF_SHM_CTL_CONS_BUSY	256u
#define FF_SHM_CTL_PROD_SHUT	320u
#define FF_SHM_CTL_CONS_CLOSED	384u

/* Bell socket bytes. */
#define FF_SHM_BELL		'D'
#define FF_SHM_SWITCH		'S'

/* Roles: which ring is tx. The connector produces into ring 0. */
enum ff_shm_role { FF_SHM_CONNECTOR = 1, FF_SHM_ACCEPTOR = 2 };

/*
 * Validate memfd (seals, size, header) and map it for conn c, whose
 * channel (the bell socket) is already at fd. Closes nothing. Table lock
 * held. 0 or -errno (then c is untouched and the caller falls back).
 */
int ff_shm_attach(struct ff_conn *c, int memfd, enum ff_shm_role role);

/* The data path (no table lock held; fd's slot has FF_FD_SHM). */
ssize_t ff_shm_recv(int fd, const struct iovec *iov, int cnt, int flags);
ssize_t ff_shm_send(int fd, const struct iovec *iov, int cnt, int flags);
ssize_t ff_shm_sendfile(int out_fd, int in_fd, off_t *off, size_t n);
/* ioctl FIONREAD/SIOCINQ, SIOCOUTQ: 0 with *val set, or -errno. */
int ff_shm_ioctl_queue(int fd, unsigned long req, int *val);
int ff_shm_shutdown(int fd, int how);
/* The last reference of this process to c is going away (table lock held). */
void ff_shm_release(struct ff_conn *c);

/*
 * Readiness, for poll/select/epoll (POLLIN/POLLOUT/POLLRDHUP/POLLHUP/
 * POLLERR bits; EPOLL* have the same values). No table lock held.
 *
 * ff_shm_ready: what is ready now, without sleeping; reads the bell socket
 *   (non-blocking) first if it has bytes, so a switch message or EOF is seen.
 * ff_shm_arm: about to sleep in the kernel on the bell socket (POLLIN) for
 *   want: announce the wait (cons_wait / prod_wait), full fence, and return
 *   what became ready meanwhile (nonzero: do not sleep, call ff_shm_disarm).
 * ff_shm_disarm: after the sleep (or instead of it): withdraw the
 *   announcement, drain bells.
 * While more than one thread of the process waits on c, ff_shm_arm's
 * *max_sleep_ms is lowered to 1 (docs/SHM.md, "Waiting and waking").
 */
unsigned ff_shm_ready(int fd, unsigned want);
unsigned ff_shm_arm(int fd, unsigned want, int *max_sleep_ms);
void ff_shm_disarm(int fd, unsigned want);

/* Spin budget in nanoseconds (FREEFLOW_SHM_SPIN_US), read at init. */
extern long ff_shm_spin_ns;

/*
 * Moving down (docs/SHM.md, "Moving down"): make fd's connection a plain
 * kernel channel now. 0 (also when it was not shm), or -errno (the
 * connection then fails with ECONNRESET). No table lock held.
 */
int ff_shm_switch(int fd);
/* Move down every shm connection of this process (before fork/exec/spawn). */
void ff_shm_switch_all(void);

#endif
