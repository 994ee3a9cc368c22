/* SPDX-License-Identifier: MIT */
/*
 * epoll_wait, epoll_pwait and epoll_pwait2: deciding pending connects they
 * report, and merging the shm registrations' readiness (shm/epoll.c) with
 * the kernel's events. The design note is at the top of wait/epoll.c.
 */
#include <errno.h>
#include <string.h>

#include "core/core.h"
#include "proc/proc.h"
#include "shm/shm.h"

/* One epoll_wait/epoll_pwait (ms) or epoll_pwait2 (ts) call. */
struct ff_ewait {
	int epfd, max, ms, use_ts, plain;
	struct epoll_event *evs;
	const struct timespec *ts;
	const sigset_t *mask;
	int64_t end;			/* once the shim handles the call */
};

/* Straight to libc, as the program asked. */
static int libc_wait(const struct ff_ewait *w)
{
	if (w->use_ts)
		return ff_real.epoll_pwait2(w->epfd, w->evs, w->max, w->ts, w->mask);
	if (w->plain)
		return ff_real.epoll_wait(w->epfd, w->evs, w->max, w->ms);
	return ff_real.epoll_pwait(w->epfd, w->evs, w->max, w->ms, w->mask);
}

/* The kernel's events into evs[0..room), waiting until end at most (0: not at all). */
static int kernel_wait(const struct ff_ewait *w, int room, int64_t end)
{
	struct timespec ts;

	if (w->use_ts)
		return ff_real.epoll_pwait2(w->epfd, w->evs, room, ff_left_ts(end, &ts), w->mask);
	return ff_real.epoll_pwait(w->epfd, w->evs, room, ff_left_ms(end), w->mask);
}

/* Whether a registration made through reg is in epfd's set (reg may be a copy of epfd). */
static int same_set(int reg, int epfd)
{
	struct ff_epset *es = ff_epset_get(reg, 0);

	return reg == epfd || (es && es == ff_epset_get(epfd, 0));
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
			if (r->ev.data.u64 == data && same_set(r->epfd, epfd))
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

static int has_tag(const struct epoll_event *evs, int n)
{
	for (int i = 0; i < n; i++)
		if (FF_EP_IS_TAG(evs[i].data.u64))
			return 1;
	return 0;
}

/* Take the shim's own events out of evs[0..n), noting them; returns how many are left. */
static int drop_bells(const struct ff_ewait *w, int n)
{
	struct ff_epset *es = ff_epset_get(w->epfd, 0);
	int kept = 0;

	for (int i = 0; i < n; i++) {
		if (!FF_EP_IS_TAG(w->evs[i].data.u64)) {
			w->evs[kept++] = w->evs[i];
		} else if (es) {
			ff_epset_rang(es, w->epfd, FF_EP_TAG_FD(w->evs[i].data.u64), w->evs[i].events);
		}
	}
	return kept;
}

/*
 * Take out of evs[0..n) the events of connections another thread swapped
 * onto shm since adopts (the settler, deciding a pending connect while this
 * one waited in the kernel): the kernel gave them for the old file, and the
 * new registration reports the connection, once, with their bits
 * (ff_epset_absorb). Returns how many are left.
 */
static int absorb_swapped(struct epoll_event *evs, int n, struct ff_epset *es, unsigned adopts)
{
	int kept = 0;

	for (int i = 0; i < n; i++)
		if (!ff_epset_absorb(es, &evs[i], adopts))
			evs[kept++] = evs[i];
	return kept;
}

/* The spin's check: a registration may have news, the kernel has events, or time is up. */
struct spin {
	struct ff_epset *es;
	int epfd;
	int64_t end;
	unsigned rounds;
};

static int spin_check(void *arg)
{
	struct spin *s = arg;
	struct pollfd p = { .fd = s->epfd, .events = POLLIN };
	int n;

	if (ff_epset_maybe(s->es))
		return 1;
	if (++s->rounds % FF_SPIN_KERNEL_EVERY)
		return 0;
	/* poll() of an epoll fd says whether events wait, and consumes none. */
	n = ff_real.poll(&p, 1, 0);
	ff_epset_asked(s->es, n == 0);
	return ff_left_ns(s->end) == 0 || n != 0;
}

/*
 * One round: the shm registrations to report now and the kernel's events,
 * merged into w->evs. With sleep, the kernel is waited for until the
 * deadline if the rings had nothing (armed: a, if es has registrations);
 * else not at all, and not if asked lately (FF_KERNEL_FRESH_NS). Returns
 * the number of events, or -1 (errno set).
 */
static int collect(const struct ff_ewait *w, struct ff_epset *es, int sleep, struct ff_armed *a)
{
	struct epoll_event *evs = w->evs;
	int max = w->max, m = 0, k = 0, err = 0;
	int64_t end = sleep ? w->end : 0;
	unsigned round = 0, adopts = atomic_load(&ff_ep_adopts);
	/* Not asked again so soon, unless this call is about to sleep or to end. */
	int ask = sleep || ff_left_ns(w->end) == 0 || !ff_epset_asked_lately(es);

	if (ff_epset_busy(es)) {
		/*
		 * shm events go to the end of evs while the kernel fills the
		 * front; they take at most half when not about to sleep (then
		 * both were found empty just before), the odd one in turn.
		 */
		int share = sleep ? max : ff_epset_odd_to_shm(es) ? max - max / 2 : max / 2;

		m = ff_epset_scan(es, &round, evs + max - share, share);
		memmove(evs + max - m, evs + max - share, (size_t)m * sizeof(*evs));
	}
	if (a && a->partial && end > ff_now_ns() + 1000000)
		end = ff_now_ns() + 1000000;
	if (max > m && ask) {
		k = kernel_wait(w, max - m, m ? 0 : end);
		err = errno;
		/* Fresh only if nothing was left behind for lack of room. */
		ff_epset_asked(es, k >= 0 && k < max - m);
	}
	if (a)
		ff_epset_disarm(a);
	if (k < 0 && !m) {
		errno = err;
		return -1;
	}
	k = k < 0 ? 0 : drop_bells(w, k);
	if (k && atomic_load(&ff_pending_count))
		k = settle_reported(w->epfd, evs, k);
	/* Decided connects may have brought shm registrations: es is looked up again. */
	es = ff_epset_get(w->epfd, 0);
	if (k && es && atomic_load(&ff_ep_adopts) != adopts)
		k = absorb_swapped(evs, k, es, adopts);
	memmove(evs + k, evs + max - m, (size_t)m * sizeof(*evs));
	if (k + m < max && ff_epset_busy(es))
		m += ff_epset_scan(es, &round, evs + k + m, max - k - m);
	return k + m;
}

static int wait_shim(struct ff_ewait *w)
{
	struct ff_epset *es;
	struct ff_armed a;
	int n, spun = 0, shm;

	for (;;) {
		es = ff_epset_get(w->epfd, 0);
		n = collect(w, es, 0, NULL);
		if (n || ff_left_ns(w->end) == 0)
			return n;
		shm = ff_epset_busy(es);
		if (shm && !spun) {
			struct spin s = { .es = es, .epfd = w->epfd, .end = w->end };

			spun = 1;
			if (ff_shm_spin_until(spin_check, &s))
				continue;
		}
		if (shm)
			ff_epset_arm(es, &a);
		n = collect(w, es, 1, shm ? &a : NULL);
		if (n || ff_left_ns(w->end) == 0)
			return n;
	}
}

static int needs_shim(int epfd)
{
	return atomic_load_explicit(&ff_pending_count, memory_order_relaxed) ||
	       (atomic_load_explicit(&ff_ep_total, memory_order_relaxed) &&
		ff_epset_busy(ff_epset_get(epfd, 0)));
}

static int ewait(struct ff_ewait *w)
{
	int saved = errno, n;

	ff_init();
	if (ff_busy || w->max <= 0 || !ff_ts_valid(w->ts))
		return libc_wait(w);
	if (!needs_shim(w->epfd)) {
		n = libc_wait(w);
		if (n <= 0 || !has_tag(w->evs, n))
			return n;
		/*
		 * The set got its first shm registration while this thread
		 * waited in libc (a kick): go on in the shim, with the timeout
		 * counted from now (a documented stretch).
		 */
		n = drop_bells(w, n);
		if (n)
			return n;
	}
	w->end = w->use_ts ? ff_deadline_ts(w->ts) : ff_deadline_ms(w->ms);
	n = wait_shim(w);
	if (n >= 0)
		errno = saved;
	return n;
}

FF_EXPORT int epoll_wait(int epfd, struct epoll_event *evs, int max, int timeout)
{
	struct ff_ewait w = { .epfd = epfd, .evs = evs, .max = max, .ms = timeout, .plain = 1 };

	return ewait(&w);
}

FF_EXPORT int epoll_pwait(int epfd, struct epoll_event *evs, int max, int timeout,
			  const sigset_t *sigmask)
{
	struct ff_ewait w = { .epfd = epfd, .evs = evs, .max = max, .ms = timeout,
			      .mask = sigmask };

	return ewait(&w);
}

/* Linux 5.11 / glibc 2.35; the system call itself on an older libc (real.c). */
FF_EXPORT int epoll_pwait2(int epfd, struct epoll_event *evs, int max,
			   const struct timespec *timeout, const sigset_t *sigmask)
{
	struct ff_ewait w = { .epfd = epfd, .evs = evs, .max = max, .ts = timeout,
			      .use_ts = 1, .mask = sigmask };

	return ewait(&w);
}
