/* SPDX-License-Identifier: MIT */
/*
 * The shm registrations of each epoll fd (epoll_shm.c), for epoll.c
 * (epoll_ctl), the replay after a swap or a move down (ff_epoll_replay,
 * epoll_shm.c, declared in shim.h) and epoll_wait.c.
 * The design note is at the top of epoll.c. Locks: the table lock may be
 * held when calling in (where said); none of these takes it.
 */
#ifndef FREEFLOW_EPOLL_SHM_H
#define FREEFLOW_EPOLL_SHM_H

#include "shim.h"
#include "shm.h"

/* The upper half of the data of the shim's own bell registrations: never the program's. */
#define FF_EP_TAG_HI		0xf7eeb311u
#define FF_EP_IS_TAG(u64)	((uint32_t)((u64) >> 32) == FF_EP_TAG_HI)
#define FF_EP_TAG_FD(u64)	((int)(uint32_t)(u64))

/* The shm registrations of one epoll fd. */
struct ff_epset;

/* shm registrations in this process: while 0, no epoll fd has any. */
extern _Atomic int ff_ep_total;
/* Registrations a swap onto shm brought in so far (ff_epset_adopt), for ff_epset_absorb. */
extern _Atomic unsigned ff_ep_adopts;

/* epfd's set, if it has one (create: made if not; NULL only when out of memory). */
struct ff_epset *ff_epset_get(int epfd, int create);
/* Whether es (NULL: none) holds registrations. */
int ff_epset_busy(const struct ff_epset *es);

/* ---- for epoll.c ---- */

/* epoll_ctl of an shm fd: 0, -errno, or FF_SHM_MOVED (fd is not on shm). */
int ff_epset_ctl(int epfd, int op, int fd, const struct epoll_event *ev);
/* Table lock held: sh, now at fd, takes the registrations made before the swap. */
void ff_epset_adopt(int fd, struct ff_shm *sh, const struct ff_epreg *regs);
/* Table lock held: sh moved down; its registrations at fd go to the kernel socket there. */
void ff_epset_moved(int fd, const struct ff_shm *sh);
/* epoll_create returned epfd: what a closed epoll fd of that number left is not its. */
void ff_epset_new(int epfd);
/*
 * newfd was made a copy of oldfd (dup, dup2, dup3, F_DUPFD*): if oldfd is
 * an epoll fd, both numbers lead to one set, as both lead to one epoll
 * file in the kernel (mio registers through a copy and waits on the
 * original). No lock held.
 */
void ff_epset_dup(int oldfd, int newfd);

/* ---- for epoll_wait.c ---- */

/*
 * Report up to room of es's registrations into out, none that this round
 * reported already (*round 0: a new round, set); returns how many.
 */
int ff_epset_scan(struct ff_epset *es, unsigned *round, struct epoll_event *out, int room);
/* Whether a registration of es may have something to report (no system call): for the spin. */
int ff_epset_maybe(struct ff_epset *es);
/* The kernel reported the bell at fd in es's epoll set (doorbells, its EOF, or a kick). */
void ff_epset_rang(struct ff_epset *es, int epfd, int fd, uint32_t events);
/*
 * Whether a swap onto shm brought in a registration of es with ev's data
 * after ff_ep_adopts was adopts: an event with that data that a kernel
 * wait begun before then returned is the old file's (the decision was made
 * by another thread meanwhile). If so, the registration takes ev's bits
 * (1) and reports them with its own next time, in one event: that
 * connection is reported once, and the bits of another fd a program gave
 * the same data are not lost. No system call.
 */
int ff_epset_absorb(struct ff_epset *es, const struct epoll_event *ev, unsigned adopts);
/* Whether the odd slot of maxevents goes to shm events this time (it alternates). */
int ff_epset_odd_to_shm(struct ff_epset *es);
/*
 * The kernel's events of es's epoll fd were just asked for (es NULL: none
 * kept), and it had none left (or had: ask again next time); whether the
 * kernel was asked, with none left, less than FF_KERNEL_FRESH_NS ago.
 */
void ff_epset_asked(struct ff_epset *es, int nothing_left);
int ff_epset_asked_lately(struct ff_epset *es);

/* The registrations armed for one sleep (ff_epset_arm, then always ff_epset_disarm). */
struct ff_armed {
	struct ff_epset *es;
	int n;
	int partial;			/* out of memory: not all armed, sleep briefly */
	struct ff_arm1 {
		int fd;
		const struct ff_shm *sh;	/* compared only: the registration holds it */
		unsigned want;
		struct ff_shm_waiter w;
	} *v, stack[16];
};
void ff_epset_arm(struct ff_epset *es, struct ff_armed *a);
void ff_epset_disarm(struct ff_armed *a);

#endif
