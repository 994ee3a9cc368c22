/* SPDX-License-Identifier: MIT */
/*
 * Shared by the readiness tests (test_shm_*): epoll shorthands, a thread
 * that writes later (so the waiter is asleep, past any spin, when the data
 * comes), and draining what is readable. Both ends of a connection are in
 * this process (t_pair) unless a test needs the peer to die.
 */
#ifndef FREEFLOW_READINESS_TEST_H
#define FREEFLOW_READINESS_TEST_H

#include <poll.h>
#include <sys/epoll.h>
#include <sys/select.h>

#include "shimtest.h"

/* Long enough that a waiter has spun and gone to sleep in the kernel. */
#define RT_LATER_MS	100
/* A wait that must succeed: generous, it only bounds a failure. */
#define RT_SURE_MS	3000
/* A wait that must find nothing. */
#define RT_NONE_MS	50

static inline int rt_ctl(int ep, int op, int fd, uint32_t events, uint64_t data)
{
	struct epoll_event ev = { .events = events, .data.u64 = data };

	return epoll_ctl(ep, op, fd, &ev);
}

/* epoll_wait into ev[0..4); the count. */
static inline int rt_wait(int ep, int ms, struct epoll_event *ev)
{
	return epoll_wait(ep, ev, 4, ms);
}

/* Exactly one event, for data, with all of want (and none of unwanted). */
static inline void rt_expect(int ep, int ms, uint64_t data, uint32_t want, uint32_t unwanted,
			     const char *how)
{
	struct epoll_event ev[4];
	int n = rt_wait(ep, ms, ev);

	CHECK(n == 1, "%s: epoll_wait gave %d (%s)", how, n, n < 0 ? strerror(errno) : "");
	if (n == 1)
		CHECK(ev[0].data.u64 == data && (ev[0].events & want) == want &&
		      !(ev[0].events & unwanted), "%s: events %#x data %llu", how, ev[0].events,
		      (unsigned long long)ev[0].data.u64);
}

static inline void rt_expect_none(int ep, int ms, const char *how)
{
	struct epoll_event ev[4];
	int n = rt_wait(ep, ms, ev);

	CHECK(n == 0, "%s: epoll_wait gave %d, events %#x data %llu", how, n,
	      n > 0 ? ev[0].events : 0, n > 0 ? (unsigned long long)ev[0].data.u64 : 0);
}

/* After RT_LATER_MS, from another thread: write one byte, shut down writing, or kill. */
enum rt_act { RT_WRITE, RT_SHUT_WR, RT_KILL };

struct rt_later {
	enum rt_act act;
	int fd;			/* RT_KILL: the pid */
	char c;
	pthread_t th;
};

static inline void *rt_later_fn(void *p)
{
	struct rt_later *l = p;

	usleep(RT_LATER_MS * 1000);
	if (l->act == RT_WRITE && write(l->fd, &l->c, 1) != 1)
		perror("rt_later write");
	if (l->act == RT_SHUT_WR && shutdown(l->fd, SHUT_WR))
		perror("rt_later shutdown");
	if (l->act == RT_KILL && kill((pid_t)l->fd, SIGKILL))
		perror("rt_later kill");
	return NULL;
}

static inline void rt_later(struct rt_later *l, enum rt_act act, int fd)
{
	l->act = act;
	l->fd = fd;
	l->c = 'L';
	pthread_create(&l->th, NULL, rt_later_fn, l);
}

static inline void rt_write_later(struct rt_later *l, int fd)
{
	rt_later(l, RT_WRITE, fd);
}

static inline void rt_join(struct rt_later *l)
{
	pthread_join(l->th, NULL);
}

/* Read what is readable now from a socket or a non-blocking pipe; the bytes read. */
static inline size_t rt_drain(int fd)
{
	char buf[65536];
	size_t got = 0;
	ssize_t r;

	while ((r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0 ||
	       (r < 0 && errno == ENOTSOCK && (r = read(fd, buf, sizeof(buf))) > 0))
		got += (size_t)r;
	return got;
}

/* Fill a non-blocking fd until EAGAIN; the bytes written. */
static inline size_t rt_fill(int fd)
{
	static char buf[65536];
	size_t put = 0;
	ssize_t w;

	while ((w = send(fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_NOSIGNAL)) > 0)
		put += (size_t)w;
	CHECK(w < 0 && errno == EAGAIN, "filling: %zd (%s)", w, strerror(errno));
	return put;
}

/* Read exactly n bytes (blocking). */
static inline int rt_read_n(int fd, size_t n)
{
	char buf[65536];

	while (n) {
		ssize_t r = read(fd, buf, n < sizeof(buf) ? n : sizeof(buf));

		if (r <= 0)
			return -1;
		n -= (size_t)r;
	}
	return 0;
}

#endif
