/* SPDX-License-Identifier: MIT */
/*
 * An event-loop echo pair, as async runtimes (tokio, libuv, asyncio) drive
 * sockets: non-blocking sockets, one epoll set per loop, each registration
 * EPOLLIN|EPOLLOUT|EPOLLRDHUP, edge-triggered or level-triggered. The
 * client keeps ee.in_flight connections open at once (non-blocking
 * connects), writes each a message of a random size and checks the echo
 * byte for byte; the server echoes through a small buffer, so a full ring
 * stops it until EPOLLOUT. Reads and writes take random sizes; an
 * edge-triggered reader may stop after a short read (as tokio does: a short
 * read says the socket was empty), a level-triggered one reads once per
 * report. With ee.half_close the client shuts down writing once it sent
 * all and ends at the echo's EOF (the server closes at ours), as an
 * echo client on tokio (write_all, shutdown, read_to_end) does. With ee.other_thread the server accepts in a second thread and
 * adds the registrations to the set its loop thread is asleep in. With
 * ee.registry_dup both register through an F_DUPFD_CLOEXEC copy of the
 * epoll fd and wait on the original, as mio (tokio's I/O driver) does.
 * The whole run must end within EE_DEADLINE_MS: a lost wake-up is a hang.
 */
#ifndef FREEFLOW_EVLOOP_ECHO_H
#define FREEFLOW_EVLOOP_ECHO_H

#include <netinet/tcp.h>
#include <sys/epoll.h>

#include "shimtest.h"

/* Bounds a hang; a correct run on a loaded machine takes a few seconds. */
#define EE_DEADLINE_MS	20000
/* Events per epoll_wait: fewer than connections, so reports share the array. */
#define EE_EVENTS	8

/*
 * As the kernel: one epoll_wait reports a registration once. Two events
 * with one data in a batch would have the loop use a connection it freed
 * at the first (a swap by the settler during the wait gave the old file's
 * event and the new registration's).
 */
static inline void ee_once_each(const struct epoll_event *ev, int n, const char *who)
{
	for (int i = 0; i < n; i++)
		for (int j = 0; j < i; j++)
			if (ev[i].data.u64 == ev[j].data.u64) {
				CHECK(0, "%s: one epoll_wait reported a registration twice (events %#x "
				      "and %#x)", who, ev[j].events, ev[i].events);
				exit(t_exit_code());
			}
}
#define EE_BUF		(256u << 10)

struct ee_params {
	int conns;		/* connections in all */
	int in_flight;		/* open at once */
	size_t max_size;	/* message sizes 1..max_size, log-uniform */
	int fixed;		/* every message exactly max_size */
	int edge;		/* EPOLLET, else level-triggered */
	int other_thread;	/* server: accept and register in another thread */
	int registry_dup;	/* register through a copy of the epoll fd, as tokio (mio) does */
	int half_close;		/* client: shutdown(SHUT_WR) once sent, done at the echo's EOF */
	uint64_t seed;
};

/* xorshift64*: the same sequence on every machine. */
static inline uint64_t ee_rnd(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}

/* 1..max, log-uniform: as many small messages as ring-filling ones. */
static inline size_t ee_size(uint64_t *s, size_t max)
{
	int bits = 1;

	while (((size_t)1 << bits) < max)
		bits++;
	size_t hi = (size_t)1 << (ee_rnd(s) % (uint64_t)(bits + 1));

	if (hi > max)
		hi = max;
	return 1 + (size_t)(ee_rnd(s) % hi);
}

/* Milliseconds to the deadline, at least 0 (a negative timeout waits forever). */
static inline int ee_left(int64_t end)
{
	int64_t left = end - t_ms();

	return left > 0 ? (int)left : 0;
}

static inline uint32_t ee_events(const struct ee_params *p)
{
	return EPOLLIN | EPOLLOUT | EPOLLRDHUP | (p->edge ? EPOLLET : 0);
}

/* One end of one connection. */
struct ee_conn {
	int fd;
	int id;
	size_t total;		/* client: the message */
	size_t sent, got;	/* client: stream offsets */
	int shut;		/* client: shut down writing */
	int rdhup;		/* EPOLLRDHUP/EPOLLHUP reported: kept, as tokio keeps READ_CLOSED */
	uint8_t *buf;		/* server: bytes read, not yet echoed */
	size_t len, off;
	int eof;
};

/* A read of a random size; 1 if the caller should read again (edge: not drained yet). */
static inline int ee_read(struct ee_conn *c, uint64_t *s, const struct ee_params *p,
			  uint8_t *to, size_t cap, ssize_t *r)
{
	size_t want = 1 + (size_t)(ee_rnd(s) % cap);

	*r = read(c->fd, to, want);
	if (*r <= 0)
		return 0;
	/* Level-triggered: one read per report, the rest is reported again. */
	if (!p->edge)
		return 0;
	/*
	 * Edge-triggered: a short read says the socket was empty (tokio relies
	 * on it), except for an end of stream already reported: no new edge
	 * comes for that one.
	 */
	return (size_t)*r == want || c->rdhup || ee_rnd(s) % 2;
}

/* ---- server ---- */

struct ee_server {
	const struct ee_params *p;
	int ep, reg, lfd;	/* reg: where registrations go (ep or a copy) */
	uint64_t s;
	int bad;
};

/* The epoll fd registrations go through: ep itself, or a copy of it (mio's Registry). */
static inline int ee_registry(const struct ee_params *p, int ep)
{
	int reg = p->registry_dup ? fcntl(ep, F_DUPFD_CLOEXEC, 0) : ep;

	CHECK(reg >= 0, "a copy of the epoll fd: %s", strerror(errno));
	return reg;
}

/* Write out what is buffered, in random sizes: 0 all written, -EAGAIN, or -1 failed. */
static inline int ee_flush(struct ee_server *sv, struct ee_conn *c)
{
	while (c->off < c->len) {
		size_t n = 1 + (size_t)(ee_rnd(&sv->s) % (c->len - c->off));
		ssize_t r = write(c->fd, c->buf + c->off, n);

		if (r < 0 && errno == EAGAIN)
			return -EAGAIN;
		if (r <= 0) {
			fprintf(stderr, "server conn %d: write: %s\n", c->id, strerror(errno));
			return -1;
		}
		c->off += (size_t)r;
	}
	c->len = c->off = 0;
	return 0;
}

/* Echo what is buffered, then read more, until the socket would block. -1: done or failed. */
static inline int ee_serve(struct ee_server *sv, struct ee_conn *c)
{
	for (;;) {
		ssize_t r;
		int more, f = ee_flush(sv, c);

		if (f)
			return f == -EAGAIN ? 0 : -1;
		more = ee_read(c, &sv->s, sv->p, c->buf, EE_BUF, &r);
		if (r < 0 && errno == EAGAIN)
			return 0;
		if (r <= 0) {
			c->eof = r == 0;
			if (r < 0)
				fprintf(stderr, "server conn %d: read: %s\n", c->id, strerror(errno));
			return -1;
		}
		c->len = (size_t)r;
		if (!more) {
			/* Level: the rest is reported again; edge: a short read said empty. */
			f = ee_flush(sv, c);
			return f == -1 ? -1 : 0;
		}
	}
}

static inline struct ee_conn *ee_server_conn(struct ee_server *sv, int fd, int id)
{
	struct ee_conn *c = calloc(1, sizeof(*c));
	struct epoll_event ev = { .events = ee_events(sv->p) };

	CHECK(c && (c->buf = malloc(EE_BUF)), "out of memory");
	c->fd = fd;
	c->id = id;
	ev.data.ptr = c;
	CHECK(epoll_ctl(sv->reg, EPOLL_CTL_ADD, fd, &ev) == 0, "server add: %s", strerror(errno));
	return c;
}

static inline void ee_server_drop(struct ee_server *sv, struct ee_conn *c)
{
	epoll_ctl(sv->reg, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	free(c->buf);
	free(c);
}

/* The accepting thread of other_thread: blocking accepts, registered into the loop's set. */
static inline void *ee_acceptor(void *arg)
{
	struct ee_server *sv = arg;

	for (int i = 0; i < sv->p->conns; i++) {
		int fd = accept4(sv->lfd, NULL, NULL, SOCK_NONBLOCK);

		if (fd < 0) {
			fprintf(stderr, "server accept %d: %s\n", i, strerror(errno));
			sv->bad++;
			break;
		}
		ee_server_conn(sv, fd, i);
	}
	return NULL;
}

/* The server process: echo p->conns connections; exit status = failures. */
static inline int ee_server_run(const struct ee_params *p, int lfd)
{
	struct ee_server sv = { .p = p, .lfd = lfd, .s = p->seed * 31 + 7 };
	struct epoll_event lev = { .events = EPOLLIN | (p->edge ? EPOLLET : 0) };
	int accepted = 0, done = 0;
	int64_t end = t_ms() + EE_DEADLINE_MS;
	pthread_t th;

	sv.ep = epoll_create1(EPOLL_CLOEXEC);
	sv.reg = ee_registry(p, sv.ep);
	if (p->other_thread) {
		pthread_create(&th, NULL, ee_acceptor, &sv);
	} else {
		fcntl(lfd, F_SETFL, O_NONBLOCK);
		lev.data.ptr = NULL;
		epoll_ctl(sv.reg, EPOLL_CTL_ADD, lfd, &lev);
	}
	while (done < p->conns && t_ms() < end && !sv.bad) {
		struct epoll_event ev[EE_EVENTS];
		/* Until the deadline: a timeout would hide a lost wake-up. */
		int n = epoll_wait(sv.ep, ev, EE_EVENTS, ee_left(end));

		ee_once_each(ev, n, "server");
		for (int i = 0; i < n; i++) {
			struct ee_conn *c = ev[i].data.ptr;
			int fd;

			if (c)
				c->rdhup |= (ev[i].events & (EPOLLRDHUP | EPOLLHUP)) != 0;
			if (c) {
				if (ee_serve(&sv, c) < 0) {
					sv.bad += !c->eof;
					ee_server_drop(&sv, c);
					done++;
				}
				continue;
			}
			while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0)
				ee_server_conn(&sv, fd, accepted++);
			if (errno != EAGAIN) {
				fprintf(stderr, "server accept: %s\n", strerror(errno));
				sv.bad++;
			}
		}
	}
	if (done < p->conns)
		fprintf(stderr, "server: %d of %d connections ended\n", done, p->conns);
	if (p->other_thread)
		pthread_join(th, NULL);
	return sv.bad + (done < p->conns);
}

/* ---- client ---- */

struct ee_client {
	const struct ee_params *p;
	int ep, reg;
	uint16_t port;
	uint64_t s;
	int started, finished;
	uint8_t wbuf[EE_BUF], rbuf[EE_BUF];
};

static inline void ee_client_start(struct ee_client *cl)
{
	struct sockaddr_storage ss;
	socklen_t len = t_addr(AF_INET, &ss, cl->port);
	struct ee_conn *c = calloc(1, sizeof(*c));
	struct epoll_event ev = { .events = ee_events(cl->p) };

	CHECK(c, "out of memory");
	c->id = cl->started++;
	c->total = cl->p->fixed ? cl->p->max_size : ee_size(&cl->s, cl->p->max_size);
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	CHECK(c->fd >= 0, "socket: %s", strerror(errno));
	if (connect(c->fd, (void *)&ss, len) && errno != EINPROGRESS)
		CHECK(0, "connect %d: %s", c->id, strerror(errno));
	ev.data.ptr = c;
	CHECK(epoll_ctl(cl->reg, EPOLL_CTL_ADD, c->fd, &ev) == 0, "client add: %s",
	      strerror(errno));
}

/* Write and read what the socket takes and gives. 1: the echo is complete, -1: failed. */
static inline int ee_client_io(struct ee_client *cl, struct ee_conn *c)
{
	uint8_t seed = (uint8_t)c->id;

	while (c->sent < c->total) {
		size_t n = 1 + (size_t)(ee_rnd(&cl->s) % (c->total - c->sent));
		ssize_t r;

		if (n > EE_BUF)
			n = EE_BUF;
		for (size_t i = 0; i < n; i++)
			cl->wbuf[i] = t_byte(c->sent + i, seed);
		r = write(c->fd, cl->wbuf, n);
		if (r < 0 && errno == EAGAIN)
			break;
		if (r <= 0) {
			fprintf(stderr, "client conn %d: write at %zu of %zu: %s\n", c->id, c->sent,
				c->total, strerror(errno));
			return -1;
		}
		c->sent += (size_t)r;
	}
	if (cl->p->half_close && c->sent == c->total && !c->shut) {
		CHECK(shutdown(c->fd, SHUT_WR) == 0, "shutdown: %s", strerror(errno));
		c->shut = 1;
	}
	for (;;) {
		ssize_t r;
		int more = ee_read(c, &cl->s, cl->p, cl->rbuf, EE_BUF, &r);

		if (r < 0 && errno == EAGAIN)
			return 0;
		if (r == 0 && c->shut && c->got == c->total)
			return 1;	/* the server's end of the echo */
		if (r <= 0) {
			fprintf(stderr, "client conn %d: read at %zu of %zu: %s\n", c->id, c->got,
				c->total, r ? strerror(errno) : "end of stream");
			return -1;
		}
		for (ssize_t i = 0; i < r; i++)
			if (cl->rbuf[i] != t_byte(c->got + (size_t)i, seed)) {
				fprintf(stderr, "client conn %d: echo corrupted at %zu\n", c->id,
					c->got + (size_t)i);
				return -1;
			}
		c->got += (size_t)r;
		if (c->got == c->total && !cl->p->half_close)
			return 1;
		if (c->got > c->total || c->got > c->sent) {
			fprintf(stderr, "client conn %d: more echoed than sent\n", c->id);
			return -1;
		}
		if (!more)
			return 0;
	}
}

/* Run the client against port; returns the number of connections that failed or hung. */
static inline int ee_client_run(const struct ee_params *p, uint16_t port)
{
	static struct ee_client cl;
	int64_t end = t_ms() + EE_DEADLINE_MS;
	int failed = 0;

	cl = (struct ee_client){ .p = p, .port = port, .s = p->seed };
	cl.ep = epoll_create1(EPOLL_CLOEXEC);
	cl.reg = ee_registry(p, cl.ep);
	while (cl.started < p->in_flight && cl.started < p->conns)
		ee_client_start(&cl);
	while (cl.finished < p->conns && t_ms() < end) {
		struct epoll_event ev[EE_EVENTS];
		int n = epoll_wait(cl.ep, ev, EE_EVENTS, ee_left(end));

		CHECK(n >= 0, "client epoll_wait: %s", strerror(errno));
		ee_once_each(ev, n, "client");
		for (int i = 0; i < n; i++) {
			struct ee_conn *c = ev[i].data.ptr;
			int r;

			c->rdhup |= (ev[i].events & (EPOLLRDHUP | EPOLLHUP)) != 0;
			r = ee_client_io(&cl, c);

			if (!r)
				continue;
			failed += r < 0;
			epoll_ctl(cl.reg, EPOLL_CTL_DEL, c->fd, NULL);
			close(c->fd);
			free(c);
			cl.finished++;
			if (cl.started < p->conns)
				ee_client_start(&cl);
		}
	}
	if (cl.finished < p->conns)
		fprintf(stderr, "client: %d of %d connections finished in %d ms (%d failed); "
			"the rest hang\n", cl.finished, p->conns, EE_DEADLINE_MS, failed);
	close(cl.ep);
	if (cl.reg != cl.ep)
		close(cl.reg);
	return failed + p->conns - cl.finished;
}

/*
 * main() of an echo test: the server in a forked process, the client
 * here; every connection must echo intact and end within the deadline.
 * FF_TEST_SEED, if set, replaces the fixed seed (for stress runs).
 */
static inline int ee_main(char **argv, struct ee_params *p)
{
	const char *seed = getenv("FF_TEST_SEED");	/* a stress run varies it */
	uint16_t port;
	pid_t pid;
	int lfd, bad;
	int64_t t0;

	t_shim_setup(argv, FA_BROKER);
	if (seed && *seed)
		p->seed = strtoull(seed, NULL, 0);
	printf("seed %llu, %d connections, %d in flight, sizes %s %zu, %s%s%s%s\n",
	       (unsigned long long)p->seed, p->conns, p->in_flight, p->fixed ? "all" : "up to",
	       p->max_size,
	       p->edge ? "edge-triggered" : "level-triggered",
	       p->other_thread ? ", registered from another thread" : "",
	       p->registry_dup ? ", through a copy of the epoll fd" : "",
	       p->half_close ? ", half-closed" : "");
	lfd = t_listen(AF_INET, &port);
	pid = fork();
	if (pid == 0)
		_exit(ee_server_run(p, lfd));
	close(lfd);
	t0 = t_ms();
	bad = ee_client_run(p, port);
	CHECK(bad == 0, "%d of %d connections failed or hung", bad, p->conns);
	printf("%d connections in %lld ms\n", p->conns, (long long)(t_ms() - t0));
	t_wait_child(pid, "server (status = failures)");
	/*
	 * Said, not asserted: a connect the loop observes late may still fall
	 * to the overlay after the agent's peer wait (issue 13, item 3); data
	 * and liveness are what this test asserts.
	 */
	printf("%d of %d connections on the fast path\n", t_fast_await(p->conns), p->conns);
	return t_shim_finish();
}

#endif
