/* SPDX-License-Identifier: MIT */
/* Description: a waiter asleep in epoll_wait, poll or select on a swapped connection wakes for the peer's shutdown(SHUT_WR) (EPOLLRDHUP/POLLRDHUP, then EOF), for the peer's death by SIGKILL (EPOLLIN|EPOLLRDHUP, then EPOLLHUP or EPOLLERR once written to), and for room after the connection was written full (EPOLLOUT edge- and level-triggered, POLLOUT, select writable) */
/* Channels: unix host-tcp shm shm-link */
#include "readiness_test.h"

static void case_shutdown_epoll(void)
{
	int ep = epoll_create1(EPOLL_CLOEXEC), a, b;
	struct rt_later l;
	char c;

	t_pair(AF_INET, &a, &b);
	CHECK(rt_ctl(ep, EPOLL_CTL_ADD, b, EPOLLIN | EPOLLRDHUP | EPOLLET, 1) == 0, "add");
	rt_expect_none(ep, 0, "before shutdown");
	rt_later(&l, RT_SHUT_WR, a);
	rt_expect(ep, RT_SURE_MS, 1, EPOLLIN | EPOLLRDHUP, 0, "epoll, peer shut down");
	rt_join(&l);
	rt_expect_none(ep, RT_NONE_MS, "edge: the shutdown once");
	CHECK(read(b, &c, 1) == 0, "EOF");
	/* Our side can still write: not hung up. */
	CHECK(write(b, "w", 1) == 1, "write after the peer's SHUT_WR");
	CHECK(read(a, &c, 1) == 1, "peer reads it");
	close(ep);
	close(a);
	close(b);
}

static void case_shutdown_poll_select(void)
{
	struct pollfd p;
	struct timeval tv = { .tv_sec = RT_SURE_MS / 1000 };
	struct rt_later l;
	fd_set r;
	int a, b;

	t_pair(AF_INET, &a, &b);
	rt_later(&l, RT_SHUT_WR, a);
	p = (struct pollfd){ .fd = b, .events = POLLIN | POLLRDHUP };
	CHECK(poll(&p, 1, RT_SURE_MS) == 1 && (p.revents & (POLLIN | POLLRDHUP)) == (POLLIN | POLLRDHUP) &&
	      !(p.revents & POLLHUP), "poll: revents %#x", p.revents);
	rt_join(&l);
	FD_ZERO(&r);
	FD_SET(b, &r);
	CHECK(select(b + 1, &r, NULL, NULL, &tv) == 1 && FD_ISSET(b, &r), "select after shutdown");
	close(a);
	close(b);
}

/* Another process connects to us and is killed while we wait. */
static void case_peer_killed(void)
{
	uint16_t port;
	int lfd = t_listen(AF_INET, &port), ep = epoll_create1(EPOLL_CLOEXEC), fd;
	struct epoll_event ev[4];
	struct rt_later l;
	uint32_t seen = 0;
	int64_t end;
	pid_t pid;
	char c;

	fd = t_accept_doomed(lfd, port, &pid);
	CHECK(rt_ctl(ep, EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLRDHUP, 9) == 0, "add");
	rt_expect_none(ep, 0, "peer alive");
	rt_later(&l, RT_KILL, pid);
	rt_expect(ep, RT_SURE_MS, 9, EPOLLIN | EPOLLRDHUP, 0, "peer killed");
	rt_join(&l);
	waitpid(pid, NULL, 0);
	CHECK(read(fd, &c, 1) <= 0, "read after the peer died");
	/* Written to, a dead peer's connection is hung up (TCP: once its reset is back). */
	send(fd, "x", 1, MSG_NOSIGNAL);
	for (end = t_ms() + RT_SURE_MS; !(seen & (EPOLLHUP | EPOLLERR)) && t_ms() < end;) {
		send(fd, "x", 1, MSG_NOSIGNAL);
		if (rt_wait(ep, 10, ev) == 1)
			seen = ev[0].events;
	}
	CHECK(seen & (EPOLLHUP | EPOLLERR), "no EPOLLHUP/EPOLLERR after writing to a dead peer: %#x",
	      seen);
	close(ep);
	close(fd);
	close(lfd);
}

/* b reads n bytes after RT_LATER_MS. */
struct drainer {
	int fd;
	size_t n;
	pthread_t th;
};

static void *drain_later(void *p)
{
	struct drainer *d = p;

	usleep(RT_LATER_MS * 1000);
	if (rt_read_n(d->fd, d->n))
		perror("drainer");
	return NULL;
}

static void drain_in_background(struct drainer *d, int fd, size_t n)
{
	d->fd = fd;
	d->n = n;
	pthread_create(&d->th, NULL, drain_later, d);
}

static void case_room(void)
{
	int et = epoll_create1(EPOLL_CLOEXEC), lt = epoll_create1(EPOLL_CLOEXEC), a, b;
	struct timeval tv = { .tv_sec = RT_SURE_MS / 1000 };
	struct pollfd p = { .events = POLLOUT };
	struct drainer d;
	fd_set w;
	size_t n;

	t_pair(AF_INET, &a, &b);
	p.fd = a;
	CHECK(rt_ctl(et, EPOLL_CTL_ADD, a, EPOLLOUT | EPOLLET, 2) == 0, "add et");
	CHECK(rt_ctl(lt, EPOLL_CTL_ADD, a, EPOLLOUT, 3) == 0, "add lt");
	rt_expect(et, RT_SURE_MS, 2, EPOLLOUT, 0, "writable at ADD");
	rt_expect(lt, RT_SURE_MS, 3, EPOLLOUT, 0, "level: writable at ADD");

	n = rt_fill(a);
	rt_expect_none(et, RT_NONE_MS, "edge: full");
	rt_expect_none(lt, 0, "level: full");
	CHECK(poll(&p, 1, 0) == 0, "poll: full, revents %#x", p.revents);
	drain_in_background(&d, b, n);
	rt_expect(et, RT_SURE_MS, 2, EPOLLOUT, 0, "edge: room after full");
	pthread_join(d.th, NULL);
	rt_expect(lt, RT_SURE_MS, 3, EPOLLOUT, 0, "level: room after full");

	n = rt_fill(a);
	drain_in_background(&d, b, n);
	CHECK(poll(&p, 1, RT_SURE_MS) == 1 && (p.revents & POLLOUT), "poll: room after full, %#x",
	      p.revents);
	pthread_join(d.th, NULL);

	n = rt_fill(a);
	drain_in_background(&d, b, n);
	FD_ZERO(&w);
	FD_SET(a, &w);
	CHECK(select(a + 1, NULL, &w, NULL, &tv) == 1 && FD_ISSET(a, &w), "select: room after full");
	pthread_join(d.th, NULL);
	close(et);
	close(lt);
	close(a);
	close(b);
}

int main(int argc, char **argv)
{
	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	case_shutdown_epoll();
	case_shutdown_poll_select();
	case_peer_killed();
	case_room();
	CHECK(t_fast_await(4) == 4, "%d fast connections", t_fast_conns());
	return t_shim_finish();
}
