/* SPDX-License-Identifier: MIT */
/*
 * The settler (at length: docs/BROKERING.md, "The settler"). A non-blocking
 * connect is decided when the application can first observe that it
 * completed (negotiate.c). Some programs look late (the JVM's HttpClient, a
 * busy event loop), and their acceptor's ACCEPT waits for the CONNECT only
 * 45 ms, so such a connection fell to the overlay. This thread asks for the
 * connector once its connect has been complete GRACE_NS without the
 * application looking, exactly as an application thread that polled it
 * would (ff_settle_slow), so nothing about the decision changes but its
 * time.
 *
 * - Only late ones: a program that looks in time decides its connections
 *   itself, as before.
 * - In the order of the connects, and side by side: this thread only
 *   watches; each connect that comes due goes to a helper thread (up to
 *   HELPERS at once), and only if none can be started does it decide one
 *   itself.
 * - One offered over a link is left to the program while the offer can
 *   still be taken, and goes to the agent at once if its bell socket's EOF
 *   says the offer was lost; one offered over a cross-host link is decided
 *   as soon as it completes.
 * - Cheap: a connect costs an entry in a list. Entries are looked at every
 *   TICK_MS with a poll(2) of no timeout (it observes, never consumes); the
 *   thread sleeps once there were none for LINGER_NS, and its own eventfd
 *   (FF_FD_CONTROL) wakes it. A connect not complete after GIVEUP_NS is left
 *   to the program.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>

#include "core/core.h"
#include "setup/setup.h"

#define WATCH_MAX	1024	/* beyond, a connect waits for the program to look, as before */
#define HELPERS		8	/* threads deciding at once */
/* A fork waits this long at most for the decisions under way (the agent answers within 250 ms). */
#define FORK_WAIT_NS	(500 * 1000000LL)
#define TICK_MS		5
#define GRACE_NS	(3 * 1000000)	/* with TICK_MS, well inside the agent's 45 ms peer wait */
#define GIVEUP_NS	(1000 * 1000000LL)
/* Ticks go on this long after the list emptied: a connect then costs no wake-up. */
#define LINGER_NS	(200 * 1000000LL)

struct watch {
	int fd;
	struct ff_conn *conn;	/* at fd when it was watched: the fd may be another's since */
	unsigned forks;		/* forks when it was watched */
	int bell;		/* FF_SETTLE_OFFERED: the offer's bell socket */
	int kind;		/* enum ff_settle_kind */
	int64_t since;		/* when connect() returned */
	int done;		/* complete (or failed) */
	int lost;		/* FF_SETTLE_OFFERED: its bell ended */
};

/*
 * A connect pending across a fork is in both processes, and the one that
 * looks first decides (fdtable.c): this thread, in the parent alone, must
 * not take that from the program. Counted at each fork's prepare, which
 * also waits for the decisions under way (deciding), starting none
 * meanwhile (forking): one finished after the fork would move the parent's
 * copy to its channel and leave the child's on an overlay socket its peer
 * no longer reads. The wait is bounded: a prepare handler of another
 * library, run before ours, may hold a lock a decision needs (malloc's).
 */
static _Atomic unsigned forks;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t idle = PTHREAD_COND_INITIALIZER;	/* deciding + outside went to 0 */
static struct watch watched[WATCH_MAX];
static int nwatched, running, helpers, deciding, forking, wake = -1;
static int outside;	/* decisions of other threads' (ff_settler_decide) under way */
static int sleeping;	/* in a poll without a tick: a new connect writes to wake */
static int waiting;	/* on cv: a new connect signals it */
static int64_t last_watch;

/* mu held: the wake eventfd, made anew if the program closed ours; or -1. */
static int wake_fd(void)
{
	struct ff_slot *s = wake >= 0 ? ff_fd_slot(wake) : NULL;

	if (s && (atomic_load(&s->flags) & FF_FD_CONTROL))
		return wake;
	wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (wake >= 0)
		ff_fd_mark(wake, FF_FD_CONTROL);
	return wake;
}

static int pending(int fd)
{
	struct ff_slot *s = ff_fd_slot(fd);

	return s && (atomic_load(&s->flags) & FF_FD_PENDING);
}

/*
 * w's time came (see next_late), or another connect() waits for its link
 * (outside_call): decide it, unless the program is at it already.
 */
static void settle(struct watch w, int outside_call)
{
	struct ff_slot *s = ff_fd_slot(w.fd);
	int fd = w.fd, mine;

	ff_table_lock();
	mine = s->conn == w.conn && s->conn->state == FF_ST_PENDING &&
	       w.forks == atomic_load(&forks);
	ff_table_unlock();
	if (!mine)
		return;
	ff_debug("fd %d: connect complete, %s: deciding it now", fd,
		 outside_call ? "another connect() waits for its link" : "the program has not looked");
	ff_settle_slow(fd, 1);
}

/* mu held: drop the fds decided (or taken up by the program), keeping the order. */
static void prune(void)
{
	int64_t now = ff_now_ns();
	int n = 0;

	for (int i = 0; i < nwatched; i++) {
		struct watch *w = &watched[i];

		if (w->fd >= 0 && pending(w->fd) && (w->done || now - w->since < GIVEUP_NS))
			watched[n++] = *w;
	}
	nwatched = n;
}

/* Whether w is looked at on ticks (else on events: its bell, its completion). */
static int ticked(const struct watch *w)
{
	return w->kind == FF_SETTLE_PLAIN;
}

/*
 * mu held: one poll, for the completion of the entries due (a ticked one
 * only once GRACE_NS old: the program looks at nearly all before) and of
 * the cross-host offers, for the offers' bells, and, with timeout -1
 * (nothing ticked), for wake.
 */
static void poll_once(int timeout)
{
	static struct pollfd p[2 * WATCH_MAX + 1];
	int64_t now = ff_now_ns();
	int n = 0, got, w = timeout < 0 ? wake_fd() : -1;
	uint64_t v;

	for (int i = 0; i < nwatched; i++) {
		const struct watch *e = &watched[i];

		if (!e->done && (!ticked(e) || now - e->since >= GRACE_NS))
			p[n++] = (struct pollfd){ .fd = e->fd, .events = POLLOUT };
		if (e->kind == FF_SETTLE_OFFERED && !e->lost)
			p[n++] = (struct pollfd){ .fd = e->bell, .events = POLLRDHUP };
	}
	p[n] = (struct pollfd){ .fd = w, .events = POLLIN };
	sleeping = timeout < 0 && w >= 0;
	pthread_mutex_unlock(&mu);
	/* Without a wake eventfd (out of fds), new connects join at the next tick. */
	got = ff_real.poll(p, (nfds_t)n + 1, timeout < 0 && w < 0 ? TICK_MS : timeout);
	if (got > 0 && (p[n].revents & POLLIN))
		(void)!ff_real.read(w, &v, sizeof(v));
	pthread_mutex_lock(&mu);
	sleeping = 0;
	/* The list may have changed meanwhile: entries are found again by fd. */
	for (int j = 0; got > 0 && j < n; j++) {
		for (int i = 0; p[j].revents && i < nwatched; i++) {
			struct watch *e = &watched[i];

			if (p[j].events == POLLOUT && e->fd == p[j].fd)
				e->done = 1;
			else if (p[j].events == POLLRDHUP && e->kind == FF_SETTLE_OFFERED &&
				 e->bell == p[j].fd && (p[j].revents & (POLLRDHUP | POLLHUP)))
				e->lost = 1;
		}
	}
}

/*
 * Whether w's connection is for this thread to decide now (see the top):
 * 1 yes; 0 not yet, and the later ones wait for it (the connects' order);
 * -1 not this thread's (taken, not complete, or the program's while its
 * offer stands).
 */
static int due(const struct watch *w, int64_t now)
{
	if (w->fd < 0 || !w->done || (w->kind == FF_SETTLE_OFFERED && !w->lost))
		return -1;
	return w->kind != FF_SETTLE_PLAIN || now - w->since >= GRACE_NS;
}

/*
 * mu held: the entries due now, one after the other, none while a fork is
 * under way: how many, and the first into *out (taken off the list) if
 * out is not NULL.
 */
static int next_late(struct watch *out)
{
	int64_t now = ff_now_ns();
	int n = 0, d;

	for (int i = 0; i < nwatched && !forking && (d = due(&watched[i], now)); i++) {
		if (d < 0)
			continue;
		if (out) {
			*out = watched[i];
			watched[i].fd = -1;	/* prune drops it */
			return 1;
		}
		n++;
	}
	return n;
}

/*
 * mu held: decide w, the lock dropped meanwhile, counted in *count (deciding
 * for next_late's, outside for other threads'): a fork waits for both.
 */
static void decide(struct watch w, int *count)
{
	(*count)++;
	pthread_mutex_unlock(&mu);
	settle(w, count == &outside);
	pthread_mutex_lock(&mu);
	if (!--*count && !deciding && !outside)
		pthread_cond_broadcast(&idle);
}

/* A helper: decides what is due, in order, while others decide theirs. */
static void *help(void *arg)
{
	struct watch w;

	(void)arg;
	pthread_mutex_lock(&mu);
	while (next_late(&w))
		decide(w, &deciding);
	helpers--;
	pthread_mutex_unlock(&mu);
	return NULL;
}

/*
 * mu held: a helper for each connect due that the helpers not yet deciding
 * leave, started with mu dropped: making a thread takes a while, and a
 * program's connect() waits for mu to have its connection watched.
 */
static void start_helpers(void)
{
	int want = next_late(NULL) - (helpers - deciding), made = 0;

	if (want > HELPERS - helpers)
		want = HELPERS - helpers;
	if (want <= 0)
		return;
	helpers += want;	/* counted first: helpers - deciding never claims fewer than run */
	pthread_mutex_unlock(&mu);
	while (made < want && ff_start_quiet_thread(help))
		made++;
	pthread_mutex_lock(&mu);
	helpers -= want - made;
}

static void *loop(void *arg)
{
	struct watch w;

	(void)arg;
	pthread_mutex_lock(&mu);
	for (;;) {
		int tick = 0;

		prune();
		while (!nwatched && ff_now_ns() - last_watch >= LINGER_NS) {
			waiting = 1;
			pthread_cond_wait(&cv, &mu);
			waiting = 0;
		}
		for (int i = 0; i < nwatched && !tick; i++)
			tick = ticked(&watched[i]);
		poll_once(tick || !nwatched ? TICK_MS : -1);
		start_helpers();
		if (!helpers && next_late(&w))
			decide(w, &deciding);	/* no thread to be had */
	}
	return NULL;
}

void ff_settler_watch(int fd, struct ff_conn *c, enum ff_settle_kind kind, int bell)
{
	pthread_mutex_lock(&mu);
	if (nwatched == WATCH_MAX)
		prune();
	if (nwatched < WATCH_MAX)
		watched[nwatched++] = (struct watch){ .fd = fd, .conn = c, .kind = kind, .bell = bell,
						      .forks = atomic_load(&forks),
						      .since = ff_now_ns() };
	/* Made here, not by the thread: it exists once connect() returns. */
	if (wake_fd() >= 0 && sleeping)
		(void)!ff_real.write(wake, &(uint64_t){ 1 }, sizeof(uint64_t));
	if (!running)
		running = ff_start_quiet_thread(loop);
	if (waiting)
		pthread_cond_signal(&cv);
	last_watch = ff_now_ns();
	pthread_mutex_unlock(&mu);
}

unsigned ff_settler_forks(void)
{
	return atomic_load(&forks);
}

void ff_settler_decide(int fd, struct ff_conn *c, unsigned forks_seen)
{
	pthread_mutex_lock(&mu);
	/* Not in deciding: that counts the helpers' work (start_helpers). */
	if (!forking)
		decide((struct watch){ .fd = fd, .conn = c, .forks = forks_seen }, &outside);
	pthread_mutex_unlock(&mu);
}

void ff_settler_atfork_prepare(void)
{
	struct timespec until;

	pthread_mutex_lock(&mu);
	atomic_fetch_add(&forks, 1);
	forking = 1;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += FORK_WAIT_NS / 1000000000LL;
	until.tv_nsec += FORK_WAIT_NS % 1000000000LL;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	while ((deciding || outside) && pthread_cond_timedwait(&idle, &mu, &until) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&mu);
}

void ff_settler_atfork_parent(void)
{
	pthread_mutex_lock(&mu);
	forking = 0;
	pthread_mutex_unlock(&mu);
}

void ff_settler_atfork_child(void)
{
	pthread_mutex_init(&mu, NULL);
	pthread_cond_init(&cv, NULL);
	pthread_cond_init(&idle, NULL);
	nwatched = 0;
	running = helpers = deciding = outside = forking = 0;
	wake = -1;	/* closed with the control fds (ff_control_atfork_child) */
}
