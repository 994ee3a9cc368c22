/* SPDX-License-Identifier: MIT */
/*
 * poll(), ppoll(), select() and pselect() (and the _FORTIFY_SOURCE
 * variants) for the two kinds of fd the kernel cannot judge alone. All go
 * through one path built on libc's ppoll(), so the signal mask of
 * ppoll/pselect is applied as the caller asked.
 *
 * Design note.
 * - Fast path: while the process has no pending connect and no
 *   shared-memory connection, straight to libc after two atomic loads;
 *   otherwise also after one relaxed load of each entry's slot flags, if
 *   no entry is of the two kinds below.
 * - A pending connect (negotiate.c) is also polled for POLLOUT, so its
 *   completion wakes the caller even if it waits only for input; a pending
 *   fd that is reported is decided at once, and its revents are then taken
 *   again, without waiting, from the fd as it now is (swapped, on shared
 *   memory, or not) and for the events the caller asked.
 * - A shared-memory connection (docs/SHM.md): the fd is its bell socket,
 *   which only carries doorbells, so readiness comes from the rings
 *   (ff_shm_ready_held), looked at first. If an entry is ready, the others
 *   are polled with a zero timeout and the call returns. Otherwise it spins
 *   for the spin budget watching the rings (ff_shm_maybe, no lock, no
 *   system call) and, every FF_SPIN_KERNEL_EVERY rounds, the other fds with
 *   a zero-timeout ppoll. Then it arms each shm entry (ff_shm_arm: the peer
 *   will ring) and sleeps in ppoll with the other entries and, for each shm
 *   entry, POLLIN on its bell socket; after the wake it disarms (the last
 *   waiter drains the bells) and takes the shm entries' revents from the
 *   rings again (reading the bell sockets too, for the peer's exit, only
 *   after a wake or in a call that does not sleep). An idle connection so
 *   costs one spin, then no CPU.
 * - A wake with nothing to report (a bell meant for another thread, a
 *   pending connect decided into nothing the caller wants) sleeps again
 *   until the caller's deadline, which is fixed at the start: the timeout
 *   is never stretched.
 * - A connection that moves down to a kernel socket during the call
 *   (FF_SHM_READY_MOVED) is polled natively from then on.
 * Each shm entry holds a reference on its connection's memory for the
 * call (ff_shm_get), so a close() in another thread unmaps nothing in use.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "proc/proc.h"
#include "shm/shm.h"

enum kind { K_PLAIN, K_PENDING, K_SHM };

/* One call: the program's entries, what the kernel is given, and the shm entries' state. */
struct pcall {
	struct pollfd *fds;		/* the program's */
	nfds_t n;
	struct pollfd *k;		/* what the kernel polls */
	struct ff_shm **sh;		/* K_SHM: a reference for the call */
	struct ff_shm_waiter *w;	/* K_SHM: armed while asleep */
	int *copy;			/* K_SHM, asleep: a copy of its bell socket (ff_shm_bell_copy), or -1 */
	unsigned char *kind;
	const sigset_t *mask;
	int64_t end;
	int nshm, nother;		/* shm entries; entries the kernel judges */
	unsigned rounds;		/* spin rounds */
	struct ff_entered_list *moved;	/* the wrapper's count of waits on socket pairs (shm/resume.c) */
};

static int any_shm_or_pending(void)
{
	return atomic_load_explicit(&ff_pending_count, memory_order_relaxed) ||
	       atomic_load_explicit(&ff_shm_conns, memory_order_relaxed);
}

static uint16_t fd_flags(int fd)
{
	struct ff_slot *s = ff_slot_enter(fd);

	return s ? atomic_load_explicit(&s->flags, memory_order_relaxed) : 0;
}

static int needs_shim(const struct pollfd *fds, nfds_t n)
{
	uint16_t any = 0;

	if (ff_busy || !any_shm_or_pending())
		return 0;
	for (nfds_t i = 0; i < n; i++)
		any |= fd_flags(fds[i].fd);
	return (any & (FF_FD_SHM | FF_FD_PENDING)) != 0;
}

static void count(struct pcall *pc)
{
	pc->nshm = pc->nother = 0;
	for (nfds_t i = 0; i < pc->n; i++) {
		if (pc->kind[i] == K_SHM)
			pc->nshm++;
		else if (pc->fds[i].fd >= 0)
			pc->nother++;
	}
}

/* What entry i is now (its shm reference taken, if any). */
static void classify(struct pcall *pc, nfds_t i)
{
	int fd = pc->fds[i].fd;
	uint16_t fl = fd_flags(fd);

	pc->kind[i] = K_PLAIN;
	pc->sh[i] = NULL;
	pc->w[i].sh = NULL;
	if ((fl & FF_FD_SHM) && (pc->sh[i] = ff_shm_get(fd)))
		pc->kind[i] = K_SHM;
	else if (fl & FF_FD_PENDING)
		pc->kind[i] = K_PENDING;
}

/*
 * Each entry the kernel judges on a connection that may go back onto shm
 * is counted in pc->moved, once: a wait done again after ff_moved_since
 * (which let go of every count) counts them anew.
 */
static void count_moved(struct pcall *pc)
{
	/* Until some connection ever moved, no fd can be such a connection (the wrapper's test too). */
	if (!pc->moved || !atomic_load_explicit(&ff_moved_seen, memory_order_relaxed))
		return;
	for (nfds_t i = 0; i < pc->n; i++) {
		int counted = pc->kind[i] != K_PLAIN;

		for (int k = 0; !counted && k < pc->moved->n; k++)
			counted = pc->moved->fd[k] == pc->fds[i].fd;
		if (!counted)
			ff_moved_enter_polled(pc->fds[i].fd, pc->moved);
	}
}

/* Entry i's connection moved down (or went away): the kernel judges it from now on. */
static void to_plain(struct pcall *pc, nfds_t i)
{
	ff_shm_put(pc->sh[i]);
	pc->sh[i] = NULL;
	pc->kind[i] = K_PLAIN;
	count(pc);
	/* A socket pair now, which may go back to shm: this wait on it is counted. */
	ff_moved_enter_polled(pc->fds[i].fd, pc->moved);
}

static short native_revents(const struct pollfd *p)
{
	struct pollfd one = { .fd = p->fd, .events = p->events };

	return ff_real.poll(&one, 1, 0) < 0 ? 0 : one.revents;
}

/* An shm entry's revents, from the rings (look: and the bell socket; see check_now). */
static short shm_revents(struct pcall *pc, nfds_t i, int look)
{
	struct pollfd *p = &pc->fds[i];
	unsigned r = ff_shm_ready_held(p->fd, pc->sh[i], (unsigned short)p->events, look);

	if (!(r & FF_SHM_READY_MOVED))
		return (short)r;
	to_plain(pc, i);
	return native_revents(p);
}

/* A pending entry the kernel reported: decide it, then take its revents as the fd now is. */
static void settle(struct pcall *pc, nfds_t i)
{
	struct pollfd *p = &pc->fds[i];

	if (ff_settle(p->fd, 1) == -EAGAIN) {
		/* Still connecting: POLLOUT was the shim's own question. */
		if (!(p->events & POLLOUT))
			p->revents &= (short)~POLLOUT;
		return;
	}
	classify(pc, i);
	count(pc);
	p->revents = pc->kind[i] == K_SHM ? shm_revents(pc, i, 0) : native_revents(p);
}

/*
 * ppoll the entries the kernel judges and, if bells, the bell sockets of
 * the shm entries (armed), until ts. Sets the revents of the entries the
 * kernel judges; returns how many have some, or -1 (errno set).
 */
static int kernel_poll(struct pcall *pc, const struct timespec *ts, int bells)
{
	int ready = 0;

	if (!pc->nother && !bells)
		return 0;
	for (nfds_t i = 0; i < pc->n; i++) {
		struct pollfd *k = &pc->k[i];

		*k = pc->fds[i];
		if (pc->kind[i] == K_SHM) {
			k->fd = !bells ? -1 : pc->copy[i] >= 0 ? pc->copy[i] : k->fd;
			k->events = POLLIN;
		} else if (pc->kind[i] == K_PENDING) {
			k->events |= POLLOUT;
		}
	}
	if (ff_real.ppoll(pc->k, pc->n, ts, pc->mask) < 0)
		return -1;
	for (nfds_t i = 0; i < pc->n; i++) {
		if (pc->kind[i] == K_SHM)
			continue;
		pc->fds[i].revents = pc->k[i].revents;
		if (pc->kind[i] == K_PENDING && pc->k[i].revents)
			settle(pc, i);
		ready += pc->fds[i].revents != 0;
	}
	return ready;
}

static int reported(const struct pcall *pc)
{
	int n = 0;

	for (nfds_t i = 0; i < pc->n; i++)
		n += pc->fds[i].revents != 0;
	return n;
}

/*
 * Everything ready now, without waiting: the number of entries to report,
 * or -1. The bell sockets are read (look) only after a wake or in a call
 * that does not sleep: otherwise a peer's exit, which only they show, ends
 * the sleep on them at once.
 */
static int check_now(struct pcall *pc, int look)
{
	static const struct timespec zero;

	/*
	 * Looking, one ppoll takes the bells with the other entries, and only
	 * a readable bell is read: a progress loop polling without a timeout
	 * (Open MPI's) paid a failed recv per connection per round.
	 */
	if (look && kernel_poll(pc, &zero, 1) < 0)
		return -1;
	for (nfds_t i = 0; i < pc->n; i++)
		if (pc->kind[i] == K_SHM)
			pc->fds[i].revents =
				shm_revents(pc, i, look && (pc->k[i].revents & (POLLIN | POLLHUP | POLLERR)));
	if (!look && kernel_poll(pc, &zero, 0) < 0)
		return -1;
	return reported(pc);
}

/* ff_shm_spin_until's check: something may be ready, or the deadline passed. */
static int spin_check(void *arg)
{
	static const struct timespec zero;
	struct pcall *pc = arg;

	for (nfds_t i = 0; i < pc->n; i++)
		if (pc->kind[i] == K_SHM && ff_shm_maybe(pc->sh[i], (unsigned short)pc->fds[i].events))
			return 1;
	if (++pc->rounds % FF_SPIN_KERNEL_EVERY)
		return 0;
	/* -1 ends the spin too: check_now reports the error. */
	return ff_left_ns(pc->end) == 0 || kernel_poll(pc, &zero, 0) != 0;
}

/* Arm the shm entries, sleep in the kernel until the deadline, disarm: entries to report, or -1. */
static int sleep_once(struct pcall *pc)
{
	struct timespec ts;
	int early = 0, ret = 0, err = 0;

	for (nfds_t i = 0; i < pc->n; i++) {
		unsigned r;

		if (pc->kind[i] != K_SHM)
			continue;
		r = ff_shm_arm(pc->fds[i].fd, (unsigned short)pc->fds[i].events, &pc->w[i]);
		if (!(r & FF_SHM_READY_MOVED) && pc->w[i].sh != pc->sh[i]) {
			/* fd was closed and reused by another thread meanwhile. */
			ff_shm_disarm(pc->fds[i].fd, &pc->w[i], 0);
			r = FF_SHM_READY_MOVED;
		}
		if (!r && (pc->copy[i] = ff_shm_bell_copy(pc->fds[i].fd, pc->sh[i])) < 0) {
			ff_shm_disarm(pc->fds[i].fd, &pc->w[i], 0);
			r = FF_SHM_READY_MOVED;
		}
		if (r & FF_SHM_READY_MOVED)
			to_plain(pc, i);
		early |= r != 0;
	}
	if (!early) {
		ret = kernel_poll(pc, ff_left_ts(pc->end, &ts), 1);
		err = errno;
	}
	for (nfds_t i = 0; i < pc->n; i++) {
		if (pc->copy[i] >= 0 && pc->copy[i] != pc->fds[i].fd)
			ff_real.close(pc->copy[i]);
		pc->copy[i] = -1;
	}
	/* The bells the kernel found readable are drained (by the last waiter). */
	for (nfds_t i = 0; i < pc->n; i++)
		if (pc->w[i].sh)
			ff_shm_disarm(pc->fds[i].fd, &pc->w[i],
				      !early && ret >= 0 && (pc->k[i].revents & (POLLIN | POLLHUP | POLLERR)));
	if (ret < 0) {
		errno = err;
		return -1;
	}
	if (early)
		return check_now(pc, 0);
	for (nfds_t i = 0; i < pc->n; i++)
		if (pc->kind[i] == K_SHM)
			pc->fds[i].revents = shm_revents(pc, i, 1);
	return reported(pc);
}

static int pcall_init(struct pcall *pc, struct pollfd *fds, nfds_t n, int64_t end,
		      const sigset_t *mask, struct ff_entered_list *moved)
{
	size_t each = sizeof(*pc->k) + sizeof(*pc->sh) + sizeof(*pc->w) + sizeof(*pc->copy) + 1;
	char *mem;

	if (!(mem = calloc(n ? n : 1, each)))
		return -ENOMEM;
	*pc = (struct pcall){ .fds = fds, .n = n, .mask = mask, .end = end, .moved = moved };
	/* Largest alignment first. */
	pc->w = (void *)mem;
	pc->sh = (void *)(mem + n * sizeof(*pc->w));
	pc->k = (void *)((char *)pc->sh + n * sizeof(*pc->sh));
	pc->copy = (void *)((char *)pc->k + n * sizeof(*pc->k));
	pc->kind = (void *)((char *)pc->copy + n * sizeof(*pc->copy));
	for (nfds_t i = 0; i < n; i++) {
		classify(pc, i);
		pc->copy[i] = -1;
		fds[i].revents = 0;
	}
	count(pc);
	count_moved(pc);
	return 0;
}

static void pcall_free(struct pcall *pc)
{
	for (nfds_t i = 0; i < pc->n; i++)
		if (pc->sh[i])
			ff_shm_put(pc->sh[i]);
	free(pc->w);
}

/*
 * Whether a connection the kernel judged went back onto shm meanwhile
 * (ff_moved_since): what the kernel said of it is its new bell's. Then
 * every entry is what its fd is now, and nothing is reported yet.
 */
static int moved_back(struct pcall *pc)
{
	if (!ff_moved_since(pc->moved))
		return 0;
	for (nfds_t i = 0; i < pc->n; i++) {
		if (pc->kind[i] != K_SHM)
			classify(pc, i);
		pc->fds[i].revents = 0;
	}
	count(pc);
	count_moved(pc);
	return 1;
}

/* Returns the number of ready entries, or -1 with errno set. */
static int poll_shim(struct pollfd *fds, nfds_t n, int64_t end, const sigset_t *mask,
		     struct ff_entered_list *moved)
{
	struct pcall pc;
	struct timespec ts;
	int ret, spun = 0, saved = errno;

	if (pcall_init(&pc, fds, n, end, mask, moved))
		return ff_real.ppoll(fds, n, ff_left_ts(end, &ts), mask);
	for (;;) {
		/* A call that will not sleep looks at the bells now. */
		ret = check_now(&pc, ff_left_ns(end) == 0);
		if (ret > 0 && moved_back(&pc))
			continue;
		if (ret || ff_left_ns(end) == 0)
			break;
		if (!spun && pc.nshm) {
			spun = 1;
			if (ff_shm_spin_until(spin_check, &pc))
				continue;
		}
		ret = sleep_once(&pc);
		if (ret > 0 && moved_back(&pc))
			continue;
		if (ret || ff_left_ns(end) == 0)
			break;
	}
	pcall_free(&pc);
	if (ret >= 0)
		errno = saved;
	return ret;
}

/*
 * A socket pair the kernel waited on went back onto shm during the wait
 * (ff_moved_since): what it said of it is its bell's; the shim waits
 * again, for the time left.
 */
FF_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	FF_ENTERED_POLL(fds, n);
	int64_t end = ff_deadline_ms(timeout);
	int ret;

	if (!needs_shim(fds, n)) {
		ret = REAL(poll)(fds, n, timeout);
		if (ret < 0 || !ff_moved_since(&ff_entered_))
			return ret;
	}
	return poll_shim(fds, n, end, NULL, &ff_entered_);
}

FF_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts,
		    const sigset_t *mask)
{
	FF_ENTERED_POLL(fds, n);
	int64_t end;
	int ret;

	if (!ff_ts_valid(ts))
		return REAL(ppoll)(fds, n, ts, mask);
	end = ff_deadline_ts(ts);
	if (!needs_shim(fds, n)) {
		ret = REAL(ppoll)(fds, n, ts, mask);
		if (ret < 0 || !ff_moved_since(&ff_entered_))
			return ret;
	}
	return poll_shim(fds, n, end, mask, &ff_entered_);
}

/*
 * _FORTIFY_SOURCE builds call these; libc's own checks the array size and
 * aborts on overflow, so an undersized array still goes to it.
 */
FF_EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
	if (!REAL(poll_chk) || fdslen / sizeof(*fds) >= n)
		return poll(fds, n, timeout);
	return ff_real.poll_chk(fds, n, timeout, fdslen);
}

FF_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts,
			  const sigset_t *mask, size_t fdslen)
{
	if (!REAL(ppoll_chk) || fdslen / sizeof(*fds) >= n)
		return ppoll(fds, n, ts, mask);
	return ff_real.ppoll_chk(fds, n, ts, mask, fdslen);
}

static int select_needs_shim(int nfds, fd_set *r, fd_set *w, fd_set *e)
{
	uint16_t any = 0;

	if (ff_busy || !any_shm_or_pending() || nfds > FD_SETSIZE)
		return 0;
	for (int fd = 0; fd < nfds; fd++)
		if ((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e)))
			any |= fd_flags(fd);
	return (any & (FF_FD_SHM | FF_FD_PENDING)) != 0;
}

/* select() in terms of poll_shim(); nfds <= FD_SETSIZE by select's contract. */
static int select_shim(int nfds, fd_set *r, fd_set *w, fd_set *e, int64_t end,
		       const sigset_t *mask, struct ff_entered_list *moved)
{
	struct pollfd p[FD_SETSIZE];
	int n = 0, ret;

	for (int fd = 0; fd < nfds; fd++) {
		short ev = (short)((r && FD_ISSET(fd, r) ? POLLIN : 0) |
				   (w && FD_ISSET(fd, w) ? POLLOUT : 0) |
				   (e && FD_ISSET(fd, e) ? POLLPRI : 0));

		if (ev)
			p[n++] = (struct pollfd){ .fd = fd, .events = ev };
	}
	ret = poll_shim(p, (nfds_t)n, end, mask, moved);
	if (ret < 0)
		return ret;
	if (r) FD_ZERO(r);
	if (w) FD_ZERO(w);
	if (e) FD_ZERO(e);
	ret = 0;
	/* As the kernel's select: hang-up and error count as readable, error as writable. */
	for (int i = 0; i < n; i++) {
		short re = p[i].revents;

		if (re & POLLNVAL) {
			errno = EBADF;
			return -1;
		}
		if (r && (p[i].events & POLLIN) && (re & (POLLIN | POLLHUP | POLLERR)))
			FD_SET(p[i].fd, r), ret++;
		if (w && (p[i].events & POLLOUT) && (re & (POLLOUT | POLLERR)))
			FD_SET(p[i].fd, w), ret++;
		if (e && (p[i].events & POLLPRI) && (re & POLLPRI))
			FD_SET(p[i].fd, e), ret++;
	}
	return ret;
}

/* The program's sets, kept for a wait done again (ff_moved_since). */
struct sets {
	fd_set r, w, e;
};

static void keep_sets(struct sets *k, const fd_set *r, const fd_set *w, const fd_set *e)
{
	if (r)
		k->r = *r;
	if (w)
		k->w = *w;
	if (e)
		k->e = *e;
}

static void put_sets(const struct sets *k, fd_set *r, fd_set *w, fd_set *e)
{
	if (r)
		*r = k->r;
	if (w)
		*w = k->w;
	if (e)
		*e = k->e;
}

FF_EXPORT int select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
	struct timespec ts;
	struct sets kept;
	int64_t end;
	int ret;
	FF_ENTERED_SELECT(nfds, r, w, e);

	if (tv && (tv->tv_sec < 0 || tv->tv_usec < 0))
		return REAL(select)(nfds, r, w, e, tv);
	if (!select_needs_shim(nfds, r, w, e)) {
		if (!ff_entered_.n || nfds > FD_SETSIZE)
			return REAL(select)(nfds, r, w, e, tv);
		keep_sets(&kept, r, w, e);
		ret = REAL(select)(nfds, r, w, e, tv);	/* Linux leaves the time not slept in *tv */
		if (ret < 0 || !ff_moved_since(&ff_entered_))
			return ret;
		put_sets(&kept, r, w, e);
	}
	if (tv) {
		/* As the kernel: microseconds past a second carry over. */
		ts.tv_sec = tv->tv_sec + tv->tv_usec / 1000000;
		ts.tv_nsec = tv->tv_usec % 1000000 * 1000;
	}
	end = ff_deadline_ts(tv ? &ts : NULL);
	ret = select_shim(nfds, r, w, e, end, NULL, &ff_entered_);
	if (tv) {
		/* Linux's select() leaves the time not slept in *tv. */
		int64_t left = ff_left_ns(end);

		tv->tv_sec = left / 1000000000;
		tv->tv_usec = left % 1000000000 / 1000;
	}
	return ret;
}

FF_EXPORT int pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts,
		      const sigset_t *mask)
{
	FF_ENTERED_SELECT(nfds, r, w, e);
	struct sets kept;
	int64_t end;
	int ret;

	if (!ff_ts_valid(ts))
		return REAL(pselect)(nfds, r, w, e, ts, mask);
	end = ff_deadline_ts(ts);
	if (!select_needs_shim(nfds, r, w, e)) {
		if (!ff_entered_.n || nfds > FD_SETSIZE)
			return REAL(pselect)(nfds, r, w, e, ts, mask);
		keep_sets(&kept, r, w, e);
		ret = REAL(pselect)(nfds, r, w, e, ts, mask);
		if (ret < 0 || !ff_moved_since(&ff_entered_))
			return ret;
		put_sets(&kept, r, w, e);
	}
	return select_shim(nfds, r, w, e, end, mask, &ff_entered_);
}
