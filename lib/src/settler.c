/* SPDX-License-Identifier: MIT */
/*
 * The settler. A non-blocking connect is decided when the application can
 * first observe that it completed (negotiate.c). Some programs look late:
 * the JVM's HttpClient ~170 ms after the handshake, a busy event loop
 * after its current round. Their acceptor's ACCEPT waits for the CONNECT
 * only 45 ms (PROTOCOL.md, "Connection brokering"), so such a connection
 * fell to the overlay (peer-timeout) and stalled the acceptor's accept()
 * meanwhile. This thread asks for the connector as soon as its connect
 * completes, exactly as an application thread that polled it would
 * (ff_settle_slow), so nothing about the decision changes but its time.
 *
 * It polls the pending fds with poll(2), which observes and never
 * consumes: an fd the application closed and reused meanwhile is woken
 * for, found not pending in the table, and dropped. It owns no fd, so
 * nothing a program closes (closefrom, close_range) can confuse it, and
 * a program counting its fds finds none more. It sleeps on a condition
 * variable while no connect is pending; while some are, new ones join its
 * poll within TICK_MS (or at the next completion, usually sooner).
 */
#include <poll.h>
#include <pthread.h>

#include "settler.h"
#include "shim.h"

#define WATCH_MAX	1024	/* beyond, a connect waits for the application to look, as before */
#define TICK_MS		5	/* well inside the agent's 45 ms peer wait */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int watched[WATCH_MAX], nwatched, running;

static int pending(int fd)
{
	struct ff_slot *s = ff_fd_slot(fd);

	return s && (atomic_load(&s->flags) & FF_FD_PENDING);
}

/* fd completed (or failed): decide it, unless the application is at it already. */
static void settle(int fd)
{
	struct ff_slot *s = ff_fd_slot(fd);
	int mine;

	ff_table_lock();
	mine = s->conn && s->conn->state == FF_ST_PENDING;
	ff_table_unlock();
	if (mine)
		ff_settle_slow(fd, 1);
}

/* mu held. */
static void forget(int fd)
{
	for (int i = 0; i < nwatched; i++)
		if (watched[i] == fd) {
			watched[i] = watched[--nwatched];
			return;
		}
}

/* mu held: drop the fds no longer pending. */
static void prune(void)
{
	int n = 0;

	for (int i = 0; i < nwatched; i++)
		if (pending(watched[i]))
			watched[n++] = watched[i];
	nwatched = n;
}

static void *loop(void *arg)
{
	static struct pollfd p[WATCH_MAX];
	int n;

	(void)arg;
	pthread_mutex_lock(&mu);
	for (;;) {
		prune();
		while (!nwatched)
			pthread_cond_wait(&cv, &mu);
		n = nwatched;
		for (int i = 0; i < n; i++)
			p[i] = (struct pollfd){ .fd = watched[i], .events = POLLOUT };
		pthread_mutex_unlock(&mu);
		if (ff_real.poll(p, (nfds_t)n, TICK_MS) > 0)
			for (int i = 0; i < n; i++)
				if (p[i].revents)
					settle(p[i].fd);
		pthread_mutex_lock(&mu);
		/* A fired fd is decided, or being decided by the application: not polled again. */
		for (int i = 0; i < n; i++)
			if (p[i].revents)
				forget(p[i].fd);
	}
	return NULL;
}

void ff_settler_watch(int fd)
{
	pthread_mutex_lock(&mu);
	prune();
	if (nwatched < WATCH_MAX)
		watched[nwatched++] = fd;
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
