/* SPDX-License-Identifier: MIT */
/*
 * epoll across the swap.
 *
 * The kernel keys an epoll registration by (file, fd); the swap replaces
 * the file behind the fd, and closing the TCP file drops its
 * registrations. So epoll_ctl on a tracked, undecided fd (a socket before
 * or during a non-blocking connect) is remembered, and after the decision:
 *  - swapped: each registration is added again on the new file, with the
 *    application's events and data (EPOLL_CTL_ADD re-checks readiness, so
 *    an edge-triggered waiter gets the edge it would have seen);
 *  - overlay: each is modified back to the application's events.
 * While a connect is pending, its registrations also ask for EPOLLOUT, so
 * completion wakes epoll_wait even for a program that waits only for
 * EPOLLIN. epoll_wait then decides every pending connection it reports,
 * drops that event (the replay re-queues the real readiness) and, if
 * nothing else is left, waits again.
 *
 * epoll_wait only knows the data word of an event, so it is matched against
 * the registrations of pending fds (a scan of the table up to the highest
 * tracked fd, done only while some connection is pending). Known limit:
 * a registration in an epoll set whose fd the application later closed and
 * reused for another epoll set would be replayed into the new set.
 */
#include <errno.h>
#include <stdlib.h>

#include "shim.h"

static uint32_t armed(const struct ff_conn *c, uint32_t events)
{
	return c->state == FF_ST_PENDING ? events | EPOLLOUT : events;
}

/* Table lock held. */
static void record(struct ff_conn *c, int epfd, int op, const struct epoll_event *ev)
{
	struct ff_epreg **p = &c->epregs, *r;

	while (*p && (*p)->epfd != epfd)
		p = &(*p)->next;
	if (op == EPOLL_CTL_DEL) {
		if ((r = *p)) {
			*p = r->next;
			free(r);
		}
		return;
	}
	if (!*p) {
		if (!(r = calloc(1, sizeof(*r))))
			return;
		r->epfd = epfd;
		*p = r;
	}
	(*p)->ev = *ev;
}

/* Table lock held: the connection just became pending. */
void ff_epoll_arm_pending(int fd, struct ff_conn *c)
{
	for (struct ff_epreg *r = c->epregs; r; r = r->next) {
		struct epoll_event ev = r->ev;

		ev.events = armed(c, ev.events);
		ff_real.epoll_ctl(r->epfd, EPOLL_CTL_MOD, fd, &ev);
	}
}

/* Table lock held: the decision is made. */
void ff_epoll_replay(int fd, struct ff_epreg *regs, int swapped)
{
	for (struct ff_epreg *r = regs; r; r = r->next) {
		struct epoll_event ev = r->ev;

		ff_real.epoll_ctl(r->epfd, swapped ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev);
	}
}

FF_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	struct ff_slot *s = ff_fd_slot(fd);
	struct epoll_event kev;
	struct ff_conn *c;
	int ret, err;

	if (ff_busy || !s || !(atomic_load(&s->flags) & FF_FD_TRACKED))
		return REAL(epoll_ctl)(epfd, op, fd, ev);
	ff_table_lock();
	while ((c = s->conn) && c->state == FF_ST_NEGOTIATING)
		ff_table_wait();
	if (!c || (c->state != FF_ST_SOCKET && c->state != FF_ST_PENDING) ||
	    (op != EPOLL_CTL_DEL && !ev)) {
		ff_table_unlock();
		return ff_real.epoll_ctl(epfd, op, fd, ev);
	}
	if (ev) {
		kev = *ev;
		kev.events = armed(c, kev.events);
	}
	ret = ff_real.epoll_ctl(epfd, op, fd, ev ? &kev : NULL);
	err = errno;
	if (ret == 0)
		record(c, epfd, op, ev);
	ff_table_unlock();
	errno = err;
	return ret;
}

/* Table lock held: the pending fd whose registration in epfd carries data. */
static int match_pending(int epfd, uint64_t data)
{
	int hw = ff_table_hiwater();

	for (int fd = 0; fd <= hw; fd++) {
		struct ff_slot *s = ff_fd_slot(fd);

		if (!(atomic_load_explicit(&s->flags, memory_order_relaxed) & FF_FD_PENDING))
			continue;
		for (struct ff_epreg *r = s->conn->epregs; r; r = r->next)
			if (r->epfd == epfd && r->ev.data.u64 == data)
				return fd;
	}
	return -1;
}

/* Decide the pending fds among evs[0..n); returns how many events are left. */
static int settle_reported(int epfd, struct epoll_event *evs, int n)
{
	int kept = 0;

	for (int i = 0; i < n; i++) {
		int fd;

		ff_table_lock();
		fd = match_pending(epfd, evs[i].data.u64);
		ff_table_unlock();
		if (fd < 0 || ff_settle(fd, 1) == -EAGAIN)
			evs[kept++] = evs[i];
	}
	return kept;
}

/* One epoll_pwait2 (ts) or epoll_pwait (ms) call; now: do not wait at all. */
struct ff_ewait {
	int epfd, max, ms, use_ts;
	struct epoll_event *evs;
	const struct timespec *ts;
	const sigset_t *mask;
};

static int wait_once(const struct ff_ewait *w, int now)
{
	static const struct timespec zero;

	if (w->use_ts)
		return ff_real.epoll_pwait2(w->epfd, w->evs, w->max, now ? &zero : w->ts, w->mask);
	return ff_real.epoll_pwait(w->epfd, w->evs, w->max, now ? 0 : w->ms, w->mask);
}

static int wait_common(const struct ff_ewait *w)
{
	int n, left, now = 0;

	for (;;) {
		n = wait_once(w, now);
		if (n < 0)
			return n;
		if (n == 0) {
			if (!now)
				return 0;
			now = 0;	/* nothing re-queued after all: wait as asked */
			continue;
		}
		if (!atomic_load(&ff_pending_count))
			return n;
		left = settle_reported(w->epfd, w->evs, n);
		if (left)
			return left;
		now = 1;	/* all were decisions; the replay re-queued their readiness */
	}
}

FF_EXPORT int epoll_wait(int epfd, struct epoll_event *evs, int max, int timeout)
{
	struct ff_ewait w = { .epfd = epfd, .evs = evs, .max = max, .ms = timeout };

	if (ff_busy || !atomic_load(&ff_pending_count))
		return REAL(epoll_wait)(epfd, evs, max, timeout);
	return wait_common(&w);
}

FF_EXPORT int epoll_pwait(int epfd, struct epoll_event *evs, int max, int timeout,
			  const sigset_t *sigmask)
{
	struct ff_ewait w = { .epfd = epfd, .evs = evs, .max = max, .ms = timeout,
			      .mask = sigmask };

	if (ff_busy || !atomic_load(&ff_pending_count))
		return REAL(epoll_pwait)(epfd, evs, max, timeout, sigmask);
	return wait_common(&w);
}

/* Linux 5.11 / glibc 2.35; a program can only call it if libc has it. */
FF_EXPORT int epoll_pwait2(int epfd, struct epoll_event *evs, int max,
			   const struct timespec *timeout, const sigset_t *sigmask)
{
	struct ff_ewait w = { .epfd = epfd, .evs = evs, .max = max, .ts = timeout,
			      .use_ts = 1, .mask = sigmask };

	if (!REAL(epoll_pwait2)) {
		errno = ENOSYS;
		return -1;
	}
	if (ff_busy || !atomic_load(&ff_pending_count))
		return ff_real.epoll_pwait2(epfd, evs, max, timeout, sigmask);
	return wait_common(&w);
}
