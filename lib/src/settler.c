/* SPDX-License-Identifier: MIT */
/*
 * The settler. A non-blocking connect is decided when the application can
 * first observe that it completed (negotiate.c). Some programs look late:
 * the JVM's HttpClient ~170 ms after the handshake, a busy event loop
 * after its current round. Their acceptor's ACCEPT waits for the CONNECT
 * only 45 ms (PROTOCOL.md, "Connection brokering"), so such a connection
 * fell to the overlay (peer-timeout) and stalled the acceptor's accept()
 * meanwhile. This thread asks for the connector once its connect has been
 * complete GRACE_MS without the application looking, exactly as an
 * application thread that polled it would (ff_settle_slow), so nothing
 * about the decision changes but its time.
 *
 * - Only late ones: a program that looks in time decides its connections
 *   itself, in its own threads, as before. This one thread decides one
 *   connection at a time, and its wait for one acceptor must not hold up
 *   connections whose programs look in time.
 * - In the order of the connects, which is the order in which one
 *   acceptor's accept() takes them: deciding them out of order would have
 *   this thread wait for an ACCEPT the acceptor sends only after the one
 *   it waits for itself, queued here behind it.
 * - Not those offered over a link (link.c): the acceptor takes an offer
 *   whenever it accepts, and the connector's 5 ms for that start when it
 *   looks; looking early would only withdraw offers of slow acceptors.
 * - poll(2) observes and never consumes: an fd the application closed and
 *   reused meanwhile is woken for, found not pending in the table, and
 *   dropped. The thread owns no fd, so nothing a program closes
 *   (closefrom, close_range) can confuse it, and a program counting its
 *   fds finds none more. It sleeps on a condition variable while no
 *   connect is pending; while some are, new ones join its poll within
 *   TICK_MS, or at the next completion.
 */
#include <poll.h>
#include <pthread.h>
#include <string.h>

#include "readiness.h"
#include "settler.h"
#include "shim.h"

#define WATCH_MAX	1024	/* beyond, a connect waits for the application to look, as before */
#define TICK_MS		5
#define GRACE_NS	(3 * 1000000)	/* with TICK_MS, well inside the agent's 45 ms peer wait */

struct watch {
	int fd;
	int64_t done;	/* when poll saw it complete; 0 not yet */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct watch watched[WATCH_MAX];
static int nwatched, running;

static int pending(int fd)
{
	struct ff_slot *s = ff_fd_slot(fd);

	return s && (atomic_load(&s->flags) & FF_FD_PENDING);
}

/* Complete GRACE_NS without the application looking: decide it, unless offered over a link. */
static void settle(int fd)
{
	struct ff_slot *s = ff_fd_slot(fd);
	int mine;

	ff_table_lock();
	mine = s->conn && s->conn->state == FF_ST_PENDING && !s->conn->offer;
	ff_table_unlock();
	if (mine)
		ff_settle_slow(fd, 1);
}

/* mu held: drop the fds decided (or taken up by the application), keeping the order. */
static void prune(void)
{
	int n = 0;

	for (int i = 0; i < nwatched; i++)
		if (watched[i].fd >= 0 && pending(watched[i].fd))
			watched[n++] = watched[i];
	nwatched = n;
}

/* mu held: poll the fds not complete yet; returns when one completes, or within timeout. */
static void await_completions(int timeout)
{
	static struct pollfd p[WATCH_MAX];
	int n = 0, now;

	for (int i = 0; i < nwatched; i++)
		if (!watched[i].done)
			p[n++] = (struct pollfd){ .fd = watched[i].fd, .events = POLLOUT };
	pthread_mutex_unlock(&mu);
	now = n ? ff_real.poll(p, (nfds_t)n, timeout) : (ff_real.poll(NULL, 0, timeout), 0);
	pthread_mutex_lock(&mu);
	for (int j = 0; now > 0 && j < n; j++)
		for (int i = 0; p[j].revents && i < nwatched; i++)
			if (watched[i].fd == p[j].fd && !watched[i].done) {
				watched[i].done = ff_now_ns();
				break;
			}
}

/* mu held: the first fd complete GRACE_NS ago (taken off the list), or -1; *wait_ms: until the next. */
static int next_late(int *wait_ms)
{
	int64_t now = ff_now_ns();

	*wait_ms = TICK_MS;
	for (int i = 0; i < nwatched; i++) {
		if (!watched[i].done)
			continue;
		if (now - watched[i].done >= GRACE_NS) {
			int fd = watched[i].fd;

			watched[i].fd = -1;	/* prune drops it */
			return fd;
		}
		*wait_ms = (int)((watched[i].done + GRACE_NS - now) / 1000000) + 1;
		return -1;	/* the connects' order: a later one waits for this one */
	}
	return -1;
}

static void *loop(void *arg)
{
	int fd, wait_ms;

	(void)arg;
	pthread_mutex_lock(&mu);
	for (;;) {
		prune();
		while (!nwatched)
			pthread_cond_wait(&cv, &mu);
		while ((fd = next_late(&wait_ms)) >= 0) {
			pthread_mutex_unlock(&mu);
			settle(fd);
			pthread_mutex_lock(&mu);
		}
		await_completions(wait_ms);
	}
	return NULL;
}

void ff_settler_watch(int fd)
{
	pthread_mutex_lock(&mu);
	if (nwatched == WATCH_MAX)
		prune();
	if (nwatched < WATCH_MAX)
		watched[nwatched++] = (struct watch){ .fd = fd };
	if (!running)
		running = ff_start_quiet_thread(loop);
	pthread_cond_signal(&cv);
	pthread_mutex_unlock(&mu);
}

void ff_settler_atfork_child(void)
{
	pthread_mutex_init(&mu, NULL);
	pthread_cond_init(&cv, NULL);
	nwatched = 0;
	running = 0;
}
