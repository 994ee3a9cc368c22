/* SPDX-License-Identifier: MIT */
/*
 * First contact: connects to an endpoint wait for the link its first
 * connection may bring (docs/BROKERING.md, "First contact").
 *
 * Design note.
 * - A process's first connection to a listener is decided by the agent,
 *   whose answer may carry a link; the connections after it go over the
 *   link. An event loop opening 16 connections at once sent all 16 to the
 *   agent, and decided them one after another in its epoll_wait, each
 *   waiting for an acceptor that accepts one at a time (0.7 ms each here).
 * - So while the first connection to an endpoint no link leads to is
 *   undecided, a connect() to that endpoint waits for its answer before
 *   its own SYN leaves (a link's offer must precede the SYN), then looks
 *   for a link again. It decides the first one itself once that completes,
 *   as the program would on seeing it writable: in an event loop, the
 *   thread that would decide it is the one waiting. It does so as the
 *   settler does (ff_settler_decide: not across a fork, and a fork waits).
 * - Not to one of this process's own listeners (its port, and its address
 *   or any address with the destination this host's): the acceptor would
 *   be this thread, which accepts only once connect() returns.
 * - Bounded: a connect() waits WAIT_MS at most for another thread's
 *   decision, and decides the first one only if it completes within
 *   WAIT_MS (then as long as the agent takes). An answer without a link,
 *   or a wait that ran out, sends connects to that endpoint to the agent at
 *   once for QUIET_MS, so a listener the agent never links (forked workers
 *   accept on it) costs one wait a second.
 * - A first connection that never reaches the agent (refused, closed
 *   first) ends nothing: the next wait for it runs out.
 * - At most CONTACT_MAX endpoints are waited for at once; a connect to
 *   another one asks the agent, as before.
 * - fork: both processes drop every record; a waiter in the parent goes to
 *   the agent.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "links/links.h"
#include "setup/setup.h"

#define CONTACT_MAX	64	/* endpoints waited for at once; more: no wait */
#define WAIT_MS		5	/* a connect() waits at most this long */
#define QUIET_MS	1000	/* after an answer without a link, no wait for this long */

/* An endpoint whose first connection is undecided, or was lately answered without a link. */
struct contact {
	struct ep to;
	int fd;			/* the first connection */
	struct ff_conn *conn;	/* at fd when it connected: the fd may be another's since */
	int quiet;		/* answered without a link, or a wait ran out: no more waits */
	unsigned forks;		/* ff_settler_forks() when it connected */
	int64_t until;		/* ms, CLOCK_MONOTONIC: the record holds until then; 0: free slot */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv;	/* CLOCK_MONOTONIC; broadcast when an answer comes */
static int cv_ready;		/* under mu */
static struct contact contacts[CONTACT_MAX];
static _Atomic int live;	/* records in use: an answer costs one load while none is */

static void cv_init(void)
{
	ff_cond_init_monotonic(&cv);
	cv_ready = 1;
}

static void drop(struct contact *c)
{
	c->until = 0;
	atomic_fetch_sub(&live, 1);
}

/* The record of `to` (mu held), dropping those past their time; NULL if none. */
static struct contact *find(const struct ep *to, int64_t now)
{
	struct contact *hit = NULL;

	for (int i = 0; i < CONTACT_MAX; i++) {
		struct contact *c = &contacts[i];

		if (c->until && c->until <= now)
			drop(c);
		else if (c->until && ep_eq(&c->to, to))
			hit = c;
	}
	return hit;
}

static void start(const struct ep *to, int fd, struct ff_conn *conn, int64_t now)
{
	for (int i = 0; i < CONTACT_MAX; i++)
		if (!contacts[i].until) {
			contacts[i] = (struct contact){ .to = *to, .fd = fd, .conn = conn,
							.forks = ff_settler_forks(),
							.until = now + QUIET_MS };
			atomic_fetch_add(&live, 1);
			return;
		}
}

/* mu held: connects to c's endpoint go to the agent at once for QUIET_MS. */
static void quiet(struct contact *c, int64_t now)
{
	c->quiet = 1;
	c->until = now + QUIET_MS;
	pthread_cond_broadcast(&cv);
}

/* 0.0.0.0 or :: (the kernel connects to loopback), answered under another name. */
static int unspecified(const struct ep *to)
{
	static const uint8_t zero[FF_EP6_LEN];

	return !memcmp(to->b, zero, to->len - 2u);
}

/*
 * Whether this process may be the acceptor of a connection to dst: one of
 * its listeners is at that port, and at that address, or at any address
 * with dst this host's (the address the first connection, fd, left from).
 */
static int to_self(const struct sockaddr_storage *dst, int first)
{
	struct sockaddr_storage me;
	socklen_t len = sizeof(me);
	struct ep a, b;
	int any;

	if (!ff_listening_at(dst, &any))
		return 0;
	if (!any)
		return 1;
	/* Not known (not bound yet: its connect() has not run), as if it were. */
	if (ff_real.getsockname(first, (void *)&me, &len) || to_ep(&me, &a) || unspecified(&a) ||
	    to_ep(dst, &b))
		return 1;
	return ip_eq(&a, &b);
}

/* The state of conn if it is still at fd, else -1. */
static int state_at(int fd, struct ff_conn *conn)
{
	struct ff_slot *s = ff_fd_slot(fd);
	int st;

	ff_table_lock();
	st = s && s->conn == conn ? (int)conn->state : -1;
	ff_table_unlock();
	return st;
}

/*
 * Decide c's first connection once it completes, by end_ms, as a program
 * that polled it would (mu dropped meanwhile). 1: another thread has it
 * (its connect() or its decision is under way); 0: decided here, or it
 * will not be in time.
 */
static int settle_first(struct contact *c, int64_t end_ms)
{
	int fd = c->fd, st;
	struct ff_conn *conn = c->conn;
	unsigned forks = c->forks;
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	int64_t left = end_ms - ff_now_ms();

	pthread_mutex_unlock(&mu);
	st = state_at(fd, conn);
	if (st == FF_ST_PENDING && left > 0 && ff_real.poll(&p, 1, (int)left) == 1)
		ff_settler_decide(fd, conn, forks);	/* observes, never consumes, as the program's poll */
	if (st == FF_ST_PENDING)
		st = state_at(fd, conn);
	pthread_mutex_lock(&mu);
	return st == FF_ST_SOCKET || st == FF_ST_NEGOTIATING;
}

int ff_contact_await(int fd, struct ff_conn *conn, const struct sockaddr *sa, socklen_t len)
{
	struct sockaddr_storage dst = { 0 };
	struct contact *c;
	struct ep to;
	int64_t now, end;
	int waited = 0, settled = 0;

	if (len > sizeof(dst))
		return 0;
	memcpy(&dst, sa, len);
	if (to_ep(&dst, &to) || ff_skip_loopback(&dst) || unspecified(&to))
		return 0;	/* never negotiated as such: no answer would end a wait */
	pthread_mutex_lock(&mu);
	if (!cv_ready)
		cv_init();
	now = ff_now_ms();
	end = now + WAIT_MS;
	c = find(&to, now);
	if (c && c->fd == fd && c->conn == conn) {
		drop(c);	/* its own record: a connect() tried again after failing */
		c = NULL;
	}
	if (!c) {
		start(&to, fd, conn, now);	/* this connection is the first */
	} else if (!c->quiet) {
		int self, first = c->fd;

		pthread_mutex_unlock(&mu);	/* before the table lock, as at fork */
		self = to_self(&dst, first);
		pthread_mutex_lock(&mu);
		if (self)
			c = NULL;	/* this process may be the acceptor (see the top) */
	}
	/* The slot may be dropped or reused while mu is released: check it is still `to`'s. */
	while (c && c->until && ep_eq(&c->to, &to) && !c->quiet) {
		int busy = 0;

		waited = 1;
		if (now < end && !settled) {
			settled = 1;
			busy = settle_first(c, end);
		} else if (now < end) {
			struct timespec ts = { .tv_sec = end / 1000, .tv_nsec = end % 1000 * 1000000L };

			busy = pthread_cond_timedwait(&cv, &mu, &ts) != ETIMEDOUT;
		}
		now = ff_now_ms();
		if (!c->until || !ep_eq(&c->to, &to) || c->quiet)
			break;	/* answered */
		if (!busy || now >= end)
			quiet(c, now);	/* it will not be answered in time */
	}
	pthread_mutex_unlock(&mu);
	return waited;
}

void ff_contact_done(const struct sockaddr_storage *remote, int linked)
{
	struct contact *c;
	struct ep to;

	if (!atomic_load_explicit(&live, memory_order_relaxed) || to_ep(remote, &to))
		return;
	pthread_mutex_lock(&mu);
	c = find(&to, ff_now_ms());
	if (c && linked) {
		drop(c);
		pthread_cond_broadcast(&cv);
	} else if (c) {
		quiet(c, ff_now_ms());
	}
	pthread_mutex_unlock(&mu);
}

void ff_contacts_atfork_prepare(void)
{
	pthread_mutex_lock(&mu);
}

static void after_fork(int child)
{
	for (int i = 0; i < CONTACT_MAX; i++)
		contacts[i].until = 0;
	atomic_store(&live, 0);
	if (child && cv_ready)
		cv_init();	/* a waiter of the parent's may have left it in use */
	else if (cv_ready)
		pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
}

void ff_contacts_atfork_parent(void)
{
	after_fork(0);
}

void ff_contacts_atfork_child(void)
{
	after_fork(1);
}
