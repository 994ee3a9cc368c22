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
 * for, found not pending in the table, and dropped. An eventfd of its own
 * (marked FF_FD_CONTROL: a fork child closes it, and an application that
 * closes it is noticed, a new one made) brings new fds into its poll at
 * once. It sleeps on a condition variable while no connect is pending.
 */
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "settler.h"
#include "shim.h"

#define WATCH_MAX	1024	/* beyond, a connect waits for the application to look, as before */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int watched[WATCH_MAX], nwatched, running, wake = -1;

/* mu held: the wake eventfd, made anew if the application closed ours; or -1. */
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
	static struct pollfd p[WATCH_MAX + 1];
	uint64_t v;
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
		p[n] = (struct pollfd){ .fd = wake_fd(), .events = POLLIN };
		pthread_mutex_unlock(&mu);
		/* Without an eventfd (out of fds), new fds join at the next completion or after 1 ms. */
		if (ff_real.poll(p, (nfds_t)n + 1, p[n].fd >= 0 ? -1 : 1) > 0)
			for (int i = 0; i < n; i++)
				if (p[i].revents)
					settle(p[i].fd);
		if (p[n].revents & POLLIN)
			(void)!ff_real.read(p[n].fd, &v, sizeof(v));
		pthread_mutex_lock(&mu);
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
	if (wake_fd() >= 0)
		(void)!ff_real.write(wake, &(uint64_t){ 1 }, sizeof(uint64_t));
	pthread_mutex_unlock(&mu);
}

void ff_settler_atfork_child(void)
{
	pthread_mutex_init(&mu, NULL);
	pthread_cond_init(&cv, NULL);
	nwatched = 0;
	running = 0;
	wake = -1;	/* closed with the control fds (ff_control_atfork_child) */
}
