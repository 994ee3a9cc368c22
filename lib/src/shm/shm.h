/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory channel (docs/SHM.md is the contract: layout, waking,
 * end of stream, moving down). Internal to the shim, like core.h.
 *
 * Conventions as in core.h: 0 or -errno, errno untouched. A conn with
 * c->shm set has FF_FD_SHM in the flags of every slot that refers to it;
 * the data path tests that bit with one relaxed load, so fds that are not
 * on shm pay nothing more.
 *
 * Lifetime: struct ff_shm is counted. The conn holds one reference while
 * c->shm points to it; every call working on it holds another (ff_shm_get),
 * taken under the table lock, so a close() or a move down in another thread
 * never unmaps memory a call is still using. The last ff_shm_put unmaps.
 *
 * Locks, in this order: rx.mu, then tx.mu (a thread needing both takes rx
 * first), then wait_mu, then the table lock (only a move down takes it
 * after ring locks, to put the new socket in place; nothing takes a ring
 * lock while holding the table lock). None is held across a sleep, except
 * the ring locks by a move down across its bounded waits (shm/switch.c).
 */
#ifndef FREEFLOW_SHM_H
#define FREEFLOW_SHM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "freeflow/shm_layout.h"
#include "agent/agent.h"
#include "core/core.h"

/* Bits of ff_shm.state (process-local, sticky). */
#define FF_SHM_BROKEN		1u	/* the peer broke the contract: ECONNRESET */
#define FF_SHM_PEER_GONE	2u	/* the bell socket is at EOF */
#define FF_SHM_SHUT_WR		4u	/* this process shut down writing */
#define FF_SHM_SHUT_RD		8u	/* this process shut down reading */
#define FF_SHM_CLOSED		16u	/* the conn let go of it (close, or moved down) */
#define FF_SHM_DOWN		32u	/* this end moved it down (then CLOSED too) */
/* A write went nowhere after the peer closed; the next fails, as after TCP's reset. */
#define FF_SHM_PEER_RESET	64u

/* One direction as this end sees it: it produces into tx, consumes rx. */
struct ff_shm_ring {
	/* Fields in the shared control block (untrusted: the peer writes them too). */
	_Atomic uint64_t *head, *tail;
	_Atomic uint32_t *cons_wait, *prod_wait, *cons_busy, *prod_shut, *cons_closed, *spill;
	_Atomic uint64_t *base;
	uint8_t *data;
	/*
	 * The stream index at data offset 0: tx, ours (the producer moves it
	 * to head whenever it finds the ring empty, so a connection that
	 * drains between messages stays in the first pages); rx, the peer's
	 * base as read after the last head (any value maps inside the ring).
	 * Under mu.
	 */
	uint64_t org;
	int spilling;			/* tx: we hold the spill claim (WRITING); under mu */
	pthread_mutex_t mu;		/* one thread of this process at a time moves bytes */
	/*
	 * Our own index (tx: head, rx: tail), the only copy we trust, and the
	 * peer's index as last validated. Written under mu; atomic so that a
	 * lockless "anything new?" check (the spin) may read them.
	 */
	_Atomic uint64_t mine, theirs;
	int waiters;			/* armed waiters of this process (wait_mu) */
};

/*
 * A mapping of one memfd. Counted apart from the conns on it: a link keeps
 * its channels mapped (link.c), for one connection after another.
 */
struct ff_shm_map {
	_Atomic int refs;
	uint8_t *base;
	size_t len;
	uint32_t ring;			/* ring_size, as checked at attach */
	/* shm/spill.c: waiting to give pages back (its list holds a reference), under its lock. */
	_Atomic int queued;
	_Atomic int touched;		/* a burst since the thread last looked */
	struct ff_shm_map *next;
	struct ff_shm_map *drop_next;	/* shm/spill.c: a reference to drop in the background */
	uint64_t seen[2];		/* each ring's tail at the last look */
	int64_t since[2];		/* CLOCK_MONOTONIC ns: when that tail was first seen */
};

struct ff_shm {
	_Atomic int refs;
	_Atomic unsigned state;		/* FF_SHM_* bits */
	_Atomic int nonblock;		/* O_NONBLOCK of the bell socket's file, as last set */
	struct ff_shm_map *map;		/* one reference */
	uint8_t *base;			/* map->base */
	uint64_t size;			/* ring_size, read once at attach */
	uint64_t cap;			/* what this end lets into a ring unread: ff_shm_cap() */
	uint32_t role;			/* enum ff_shm_role */
	pid_t pid;			/* the process that attached it (a fork child's copy is not it) */
	_Atomic uint32_t *switch_by;
	struct ff_shm_ring tx, rx;
	pthread_mutex_t wait_mu;	/* cons_wait/prod_wait, waiters, draining */
	/*
	 * A wait of this process was told the bell socket is readable since
	 * its last drain: the last armed waiter to leave drains it then, and
	 * only then (docs/SHM.md, "Waiting and waking"). Set without wait_mu,
	 * taken under it.
	 */
	_Atomic int bell_unread;
	pthread_cond_t drained;		/* broadcast after each drain of the bell */
};

static inline _Atomic uint32_t *ff_shm_word(struct ff_shm *sh, size_t off)
{
	return (_Atomic uint32_t *)(void *)(sh->base + off);
}

/*
 * Validate memfd (seals, size, header) and map it for a connection where
 * this end has role. No lock needed; closes nothing. 0 with *out set (one
 * reference, for the conn), or -errno with *why saying what was wrong
 * (then the caller falls back).
 */
int ff_shm_open(int memfd, enum ff_shm_role role, struct ff_shm **out, const char **why);
/*
 * A new channel with rings of ring bytes, laid out and sealed as the agent
 * makes one, its offer word OFFERED, mapped for the connector: 0 with *out
 * (one reference) and *memfd (for the acceptor's copy), or -errno.
 */
int ff_shm_create(uint32_t ring, int *memfd, struct ff_shm **out);
/*
 * A new connection on a channel already mapped: 0 with *out (one
 * reference; the map gets one more), or -ENOMEM.
 */
int ff_shm_adopt(struct ff_shm_map *m, enum ff_shm_role role, struct ff_shm **out);
/* One more reference to sh's mapping, for keeping it past the connection. */
struct ff_shm_map *ff_shm_map_get(struct ff_shm *sh);
void ff_shm_map_put(struct ff_shm_map *m);
/*
 * Whether both ends of the channel let go of it for good (the last
 * reference to each end's struct ff_shm went), after a connection the
 * acceptor took, and this process's giving-back thread has let go of it:
 * then nobody touches it and its connector may reuse it.
 */
int ff_shm_map_idle(const struct ff_shm_map *m);
/*
 * Lay the header out as new for the next offer (only when idle), offer
 * word OFFERED: 0, or -EBUSY (a thread, ours or the peer's, is giving a
 * ring's pages back: nothing changed, try another channel).
 */
int ff_shm_map_reset(struct ff_shm_map *m);
/*
 * Giving memory back (docs/SHM.md; shm/spill.c). A ring of m was seen
 * empty with its spill word USED: give its pages past FF_SHM_KEEP back
 * once it has stayed so for FF_SHM_IDLE_MS (a burst that goes on or comes
 * again soon keeps its pages, so it pays no page faults), or for
 * FF_SHM_CROWD_IDLE_MS for channels other than the FF_SHM_WARM_CHANNELS
 * this process used last (bursts on many connections one after the
 * other: at most that many channels' last bursts stay for the second).
 * Cheap when m is waiting already. No lock held.
 */
#define FF_SHM_IDLE_MS		1000
#define FF_SHM_CROWD_IDLE_MS	20
#define FF_SHM_WARM_CHANNELS	32
void ff_shm_spill_later(struct ff_shm_map *m);
/* A burst went into a ring of m: if m waits to give pages back, it is among the channels used last. */
void ff_shm_spill_touch(struct ff_shm_map *m);
/*
 * Drop a reference to m off the caller's path (shm/spill.c): unmapping a
 * channel and freeing its pages costs 70 us, and a link closing drops up
 * to 32 of them. NULL is ignored.
 */
void ff_shm_map_put_later(struct ff_shm_map *m);
void ff_shm_spill_atfork_prepare(void);
void ff_shm_spill_atfork_parent(void);
void ff_shm_spill_atfork_child(void);
/* Give the pages of ring data (ring bytes) past FF_SHM_KEEP back: they read as zero again. */
void ff_shm_give_back(uint8_t *data, uint64_t ring);
/*
 * Table lock held: c, whose bell socket was just put at its fd (O_NONBLOCK
 * as nonblock), takes sh.
 */
void ff_shm_attach(struct ff_conn *c, struct ff_shm *sh, int nonblock);
/* fcntl(F_SETFL)/ioctl(FIONBIO) changed O_NONBLOCK of fd's file. */
void ff_shm_set_nonblock(int fd, int on);
/*
 * The last reference of this process to c is going away (table lock held):
 * tells the peer both directions are closed (prod_shut, cons_closed), then
 * drops c's reference. A move down must not call it (the peer would read
 * EOF): it clears c->shm and drops the reference with ff_shm_put.
 */
void ff_shm_release(struct ff_conn *c);

/* fd's shm with a reference (takes the table lock), or NULL if fd is not on shm. */
struct ff_shm *ff_shm_get(int fd);
void ff_shm_put(struct ff_shm *sh);

/*
 * The data path (no table lock held). Each returns FF_SHM_MOVED when fd is
 * not, or no longer, on shm (closed meanwhile, or moved down): the caller
 * then makes the kernel call on fd instead.
 */
#define FF_SHM_MOVED		(-4096 - 1)	/* outside the errno range */
ssize_t ff_shm_recv(int fd, const struct iovec *iov, int cnt, int flags);
ssize_t ff_shm_send(int fd, const struct iovec *iov, int cnt, int flags);
/* sendfile with out_fd on shm: the file is read straight into the ring. */
ssize_t ff_shm_sendfile(int out_fd, int in_fd, off_t *off, size_t n);
/* ioctl FIONREAD/SIOCINQ, SIOCOUTQ, SIOCOUTQNSD, SIOCATMARK: 0 with *val set. */
int ff_shm_ioctl(int fd, unsigned long req, int *val);
int ff_shm_shutdown(int fd, int how);

/*
 * Readiness, for poll/select/epoll (POLLIN/POLLOUT/POLLRDHUP/POLLHUP/
 * POLLERR bits; EPOLL* have the same values). No table lock held.
 * A result with FF_SHM_READY_MOVED means fd is not (or no longer) on shm:
 * poll it natively, for what the program asked.
 *
 * ff_shm_ready: what poll would report now for want (POLLERR/POLLHUP
 *   always), without sleeping. Reads the shared indices; only when nothing
 *   wanted is ready does it look at the bell socket (one non-blocking
 *   read), so that the peer's exit or switch is seen. A switch by the peer
 *   is adopted here (ff_shm_switch), and then the result is MOVED.
 * ff_shm_arm: about to sleep in the kernel on the bell socket (POLLIN) for
 *   want: announce the wait (cons_wait / prod_wait), full fence, and return
 *   what became ready meanwhile (nonzero: do not sleep). w keeps a
 *   reference until ff_shm_disarm, which must follow in every case (also
 *   for a nonzero result; a MOVED result leaves w empty).
 * ff_shm_disarm: after the sleep (or instead of it): withdraw the
 *   announcement and drop w's reference; rang: the sleep's kernel call
 *   said the bell socket is readable (ff_shm_bell_rang). The last armed
 *   waiter of the process drains the bell if a wait was told so since the
 *   last drain (docs/SHM.md, "Waiting and waking"), so a caller that finds
 *   nothing ready after its sleep simply arms again.
 * ff_shm_bell_rang: a kernel wait (epoll's, reporting the bell) was told
 *   the bell socket of sh is readable: the bell is drained by the last
 *   armed waiter to leave, or by the next look (ff_shm_ready_held).
 */
#define FF_SHM_READY_MOVED	0x80000000u
struct ff_shm_waiter {
	struct ff_shm *sh;
	unsigned want;
};
unsigned ff_shm_ready(int fd, unsigned want);
unsigned ff_shm_arm(int fd, unsigned want, struct ff_shm_waiter *w);
void ff_shm_disarm(int fd, struct ff_shm_waiter *w, int rang);
void ff_shm_bell_rang(struct ff_shm *sh);
/*
 * A copy of the bell socket at fd to sleep on, made under wait_mu while fd
 * still is the bell: a move down or a park puts its kernel socket at fd,
 * and a kernel wait woken on the bell looks at what is at the fd then, so
 * one asleep on fd would sleep on, on the bell alone, through the new
 * socket's data. The copy (close it after); -ENOENT if it was moved off
 * shm (the caller looks again: it is a kernel socket now); -EBADF if fd
 * was closed; fd itself if no copy can be made (EMFILE).
 */
int ff_shm_bell_copy(int fd, struct ff_shm *sh);
/*
 * For wait/poll.c and wait/epoll.c, which hold a reference across a call or an
 * epoll registration and look at many connections in turn:
 * ff_shm_ready_held: ff_shm_ready on sh, which sits at fd; look 0 leaves
 *   the bell socket alone (for a first look, before a sleep on the bell
 *   socket, which its EOF or a switch message would end at once), 1 reads
 *   it when nothing wanted is ready, FF_SHM_LOOK_RUNG always (its bell
 *   rang, and an edge-triggered waiter gets no second wake-up for it).
 * ff_shm_maybe: no lock, no system call, possibly spurious: 0 means
 *   ff_shm_ready would report nothing of want now, save what only the
 *   bell socket can tell (the peer's exit, which wakes a poll of it).
 * ff_shm_spin_until: spin as ff_shm_spin does, until check(arg) returns
 *   nonzero (returned) or the budget is spent (0).
 * ff_shm_conns: attached and not yet released (ff_shm_release), so never
 *   below the shm connections of this process (one moved down stays
 *   counted): while 0, poll and select need not look at their fds.
 */
#define FF_SHM_LOOK_RUNG	2
unsigned ff_shm_ready_held(int fd, struct ff_shm *sh, unsigned want, int look);
int ff_shm_maybe(struct ff_shm *sh, unsigned want);
int ff_shm_spin_until(int (*check)(void *arg), void *arg);
extern _Atomic int ff_shm_conns;

/* ---- shm/copy.c ---- */

/* memcpy for a ring's bytes (into or out of a ring): where rep movsb is slow, a loop (copy.c says why). */
void ff_shm_copy(void *dst, const void *src, size_t n);
#if defined(__x86_64__)
/* The loop itself, for n >= 256 where ff_shm_copy_has_avx2(): exported for its test. */
void ff_shm_copy_avx2(uint8_t *d, const uint8_t *s, size_t n);
int ff_shm_copy_has_avx2(void);
#endif

/* ---- shm/ring.c: the rings themselves, for shm/io.c and shm/switch.c ---- */

/*
 * The peer's index, loaded (acquire) and validated against ours: bytes
 * readable in rx / free room in tx, or -ECONNRESET (the peer broke the
 * contract; sh is then marked broken). The ring's mu held.
 */
int64_t ff_shm_rx_avail(struct ff_shm *sh);
int64_t ff_shm_tx_room(struct ff_shm *sh);
/* The contiguous bytes of r's data from stream index i, at most n: their length, *p set. */
static inline size_t ff_shm_seg(const struct ff_shm *sh, const struct ff_shm_ring *r,
				uint64_t i, size_t n, uint8_t **p)
{
	uint64_t o = (i - r->org) & (sh->size - 1);

	*p = r->data + o;
	return n < sh->size - o ? n : (size_t)(sh->size - o);
}
/*
 * tx.mu held, about to write [i, i + *n) of tx: 0 with the pages past
 * FF_SHM_KEEP claimed if the bytes reach them, or *n cut to what fits
 * before KEEP while the peer gives them back or has broken the spill word
 * (0: none fits yet, wait as for room); or -ECONNRESET once the bytes
 * reach KEEP and the peer wrote garbage into the spill word.
 * ff_shm_tx_produced releases the claim.
 */
int ff_shm_tx_claim(struct ff_shm *sh, uint64_t i, size_t *n);
/* Publish n more bytes consumed (rx) / produced (tx), waking the peer if it waits. mu held. */
void ff_shm_rx_consumed(int fd, struct ff_shm *sh, uint64_t n);
void ff_shm_tx_produced(int fd, struct ff_shm *sh, uint64_t n);
/* Mark sh broken (once, with a debug line saying why); returns -ECONNRESET. */
int ff_shm_broken(struct ff_shm *sh, const char *why);
/* The peer has shut its sending side (prod_shut seen, or gone): rx ends once empty. */
int ff_shm_rx_shut(struct ff_shm *sh);
/*
 * Who moved the connection down: 0 nobody (yet), the role of the end that
 * did (switch_by), or -ECONNRESET for a value no end may write there.
 */
int ff_shm_switched_by(struct ff_shm *sh);

/*
 * Blocking waits of the data path, for dir POLLIN (data, end of stream) or
 * POLLOUT (room). ff_shm_spin: spin up to ff_shm_spin_ns for a change;
 * 1 if one came (the caller re-checks). ff_shm_wait: sleep on the bell
 * socket for up to ms (< 0: no timeout); 0 when something may have
 * changed, -ETIMEDOUT, -EINTR or -EBADF.
 */
int ff_shm_spin(struct ff_shm *sh, unsigned dir);
int ff_shm_wait(int fd, struct ff_shm *sh, unsigned dir, int ms);

/* Spin budget in nanoseconds (FREEFLOW_SHM_SPIN_US), read at init. */
extern long ff_shm_spin_ns;
void ff_shm_init(void);
/* What a ring of ring_size may hold unread: no more than a move down puts in a socket buffer. */
uint64_t ff_shm_cap(uint64_t ring_size);

/*
 * Moving down (docs/SHM.md, "Moving down"; shm/switch.c): make fd's
 * connection a plain kernel channel now. 0 (also when it was not shm), or
 * -errno (the connection then fails with ECONNRESET). No table lock held,
 * none of sh's locks held.
 */
int ff_shm_switch(int fd);
/*
 * Move down every shm connection of this process (before fork, vfork,
 * exec, posix_spawn): with FF_SHM_SWITCH_KEPT only those at an fd without
 * FD_CLOEXEC (exec keeps them); with FF_SHM_SWITCH_LOCK return holding the
 * table lock, no working shm connection left (fork). No lock held.
 */
#define FF_SHM_SWITCH_KEPT	1u
#define FF_SHM_SWITCH_LOCK	2u
void ff_shm_switch_all(unsigned how);
/* sendmsg/sendmmsg is about to pass fds with SCM_RIGHTS: move down those on shm. */
void ff_shm_switch_passed(const struct msghdr *mh);
/*
 * Set once the process cannot be followed on shm (routes.c, ff_shm_avoid):
 * new shm connections move down at once.
 */
extern _Atomic int ff_shm_avoided;

/*
 * ---- shm/epoll.c: the shm registrations of each epoll fd, for wait/epoll.c
 * (epoll_ctl), the replay after a swap or a move down (ff_epoll_replay,
 * shm/epoll.c, below) and wait/epoll_wait.c.
 * The design note is at the top of wait/epoll.c. Locks: the table lock may be
 * held when calling in (where said); none of these takes it.
 */

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

/* ---- for wait/epoll.c ---- */

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

/*
 * Table lock held: fd's connection was decided (swapped or not) or moved down from shm:
 * its epoll registrations regs (made before the decision) go to the file
 * now at fd, shm registrations of a moved one to its kernel socket.
 */
void ff_epoll_replay(int fd, struct ff_epreg *regs, int swapped);

/* ---- wait/poll.c, shm/epoll.c, wait/epoll_wait.c: the spin's cadence ---- */

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

/* ---- shm/park.c and switch.c: parking on TCP for a migration (docs/SHM.md, "Parking") ---- */

/* Whether the ends of a connection are those a PARK or RESUME names (as their wire bytes). */
int ff_park_same_ends(const struct ff_ends *e, const struct ff_park *p);
/* An shm connection was made: the process's parking thread runs (started once). */
void ff_shm_parker_kick(void);
void ff_shm_parker_atfork_child(void);
/*
 * Both ring locks held: the socket the parking thread got for sh (or, with
 * ends, for the connection at them: one being closed, whose fd is gone),
 * waiting a bounded time; or -1.
 */
int ff_shm_park_wait(struct ff_shm *sh, const struct ff_ends *ends);
/* Park sh at fd on the socket ff_shm_park_wait gives (adopt: only if its peer parked it); 0 or -errno (switch.c). */
int ff_shm_park(int fd, struct ff_shm *sh, int adopt);
/* Its last fd closed, before the conn is freed (no lock held): a parked peer still gets what it wrote (switch.c). */
void ff_shm_closing(struct ff_shm *sh, const struct ff_ends *ends);

/* ---- shm/resume.c: a socket pair back onto shm (docs/SHM.md, "Back to shared memory") ---- */

/*
 * A thread inside calls on moved connections (FF_FD_MOVED): declare one
 * with FF_ENTERED at the top of a wrapper; it is left whichever way the
 * wrapper returns.
 */
struct ff_entered {
	struct ff_conn *c[2];
	int writes[2];
};
void ff_moved_leave(struct ff_entered *e);
/* The cleanup: every data call passes here, and only one counted pays a call. */
static inline void ff_moved_done(struct ff_entered *e)
{
	if (e->c[0])
		ff_moved_leave(e);
}
#define FF_ENTERED struct ff_entered ff_entered_ __attribute__((cleanup(ff_moved_done))) = { { NULL, NULL }, { 0, 0 } }
/*
 * fd's slot has FF_FD_MOVED: wait while its connection is held for this
 * kind of call (writes: also shutdown), then count this thread inside it
 * (in e; two at most per wrapper). 1 when it is on shm now (not counted:
 * take the shm path), else 0.
 */
int ff_moved_enter(int fd, int writes, struct ff_entered *e);
/*
 * The same for a wait over fds (FF_ENTERED_POLL, FF_ENTERED_SELECT): every
 * moved connection among them, counted as polled, which never waits.
 */
struct ff_entered_list {
	struct ff_conn **c;
	int *fd;
	int n;
};
void ff_moved_enter_poll(struct pollfd *fds, nfds_t n, struct ff_entered_list *e);
/* One fd of a wait that the poll shim now leaves to the kernel (it moved down during the call). */
void ff_moved_enter_polled(int fd, struct ff_entered_list *e);
void ff_moved_enter_select(int nfds, fd_set *r, fd_set *w, fd_set *x, struct ff_entered_list *e);
void ff_moved_leave_list(struct ff_entered_list *e);
/*
 * After a kernel wait over e's socket pairs: whether one went onto shm
 * during it (its pair is the channel's bell now, whose bytes say nothing
 * of the connection's: wait again, through the shim). Then e is left
 * (emptied): the wait that follows counts anew.
 */
int ff_moved_since(struct ff_entered_list *e);
static inline void ff_moved_list_done(struct ff_entered_list *e)
{
	if (e->c || e->fd)
		ff_moved_leave_list(e);
}
/* Until a connection of the process moved down, a wait costs one load here. */
#define FF_ENTERED_LIST struct ff_entered_list ff_entered_ __attribute__((cleanup(ff_moved_list_done))) = { NULL, NULL, 0 }
#define FF_ENTERED_POLL(fds, n)		FF_ENTERED_LIST;						\
	if (atomic_load_explicit(&ff_moved_seen, memory_order_relaxed))				\
		ff_moved_enter_poll((fds), (n), &ff_entered_)
#define FF_ENTERED_SELECT(nfds, r, w, x) FF_ENTERED_LIST;						\
	if (atomic_load_explicit(&ff_moved_seen, memory_order_relaxed))				\
		ff_moved_enter_select((nfds), (r), (w), (x), &ff_entered_)
/* shutdown(fd, how) on a moved connection (entered): noted, so it never goes back to shm. */
void ff_moved_shut(int fd, int how);
/*
 * Table lock held, a fork, exec or spawn about to give fds to another
 * process: ff_resume_busy says a hold is under way (wait for it, then look
 * again); ff_resume_shared keeps new ones off for SHARE_MS from now.
 */
int ff_resume_busy(void);
void ff_resume_shared(void);
/*
 * fd goes where the library cannot follow it (SCM_RIGHTS, stdio): once no
 * hold is under way, its connection is marked never to come back onto shm
 * from a socket pair. Before any move down of it.
 */
void ff_resume_passing(int fd);
/* Whether any fd is a moved connection (the parking thread runs for them too). */
int ff_moved_any(void);
/* The parking thread's RESUME p (p->sock the memfd, still the caller's): 1 on shm now, 0 not (*why). */
int ff_shm_resume(const struct ff_park *p, const char **why);
/*
 * Pollers asleep in the kernel on a pair that became sh's bell: sh's
 * consumer is armed for them (the peer rings at every write) until the
 * last of them leaves (ring.c); disarm takes over the caller's reference.
 */
void ff_shm_raw_arm(struct ff_shm *sh);
void ff_shm_raw_disarm(int fd, struct ff_shm *sh);

#endif
