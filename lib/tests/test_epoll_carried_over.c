/* SPDX-License-Identifier: MIT */
/* Description: epoll registrations made before the swap (edge- and level-triggered, in two epoll sets, before a non-blocking or a blocking connect) are carried over with their events and data */
/* Channels: unix host-tcp shm shm-link */
#include "shimtest.h"

#define CASES	2

/* Another process: accept CASES, greet each, close after the client's reply. */
static int server(int lfd)
{
	int bad = 0;

	for (int i = 0; i < CASES; i++) {
		int fd = accept(lfd, NULL, NULL);
		char c;

		bad += !t_swapped(fd);
		bad += write(fd, "hello", 5) != 5;
		bad += read(fd, &c, 1) != 1;
		close(fd);
	}
	return bad;
}

static int add(int ep, int fd, uint32_t events, uint64_t data)
{
	struct epoll_event ev = { .events = events, .data.u64 = data };

	return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
}

/* One event expected: events include want, data as registered. */
static void expect_event(int ep, uint32_t want, uint64_t data, const char *how)
{
	struct epoll_event ev[4];
	int n = epoll_wait(ep, ev, 4, 2000);

	CHECK(n == 1, "%s: epoll_wait gave %d", how, n);
	if (n == 1)
		CHECK((ev[0].events & want) && ev[0].data.u64 == data,
		      "%s: events %#x data %llu", how, ev[0].events,
		      (unsigned long long)ev[0].data.u64);
}

static void case_nonblocking(uint16_t port)
{
	int et = epoll_create1(EPOLL_CLOEXEC), lt = epoll_create1(EPOLL_CLOEXEC);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	struct sockaddr_storage ss;
	socklen_t len = t_addr(AF_INET, &ss, port);
	struct epoll_event ev[1];
	char buf[8];

	CHECK(add(et, fd, EPOLLIN | EPOLLET, 42) == 0, "add ET");
	CHECK(connect(fd, (void *)&ss, len) == -1 && errno == EINPROGRESS, "connect");
	CHECK(add(lt, fd, EPOLLIN, 43) == 0, "add LT while connecting");
	/* Only EPOLLIN was asked for: the greeting is what must wake us. */
	expect_event(et, EPOLLIN, 42, "edge");
	CHECK(t_swapped(fd), "not swapped");
	expect_event(lt, EPOLLIN, 43, "level");
	expect_event(lt, EPOLLIN, 43, "level, again");
	CHECK(read(fd, buf, sizeof(buf)) == 5, "read greeting");
	CHECK(epoll_wait(et, ev, 1, 50) == 0, "edge fired twice");
	CHECK(write(fd, "x", 1) == 1, "reply");
	close(fd);
	close(et);
	close(lt);
}

static void case_blocking(uint16_t port)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_storage ss;
	socklen_t len = t_addr(AF_INET, &ss, port);

	CHECK(add(ep, fd, EPOLLIN | EPOLLRDHUP, 7) == 0, "add");
	CHECK(connect(fd, (void *)&ss, len) == 0, "connect: %s", strerror(errno));
	CHECK(t_swapped(fd), "not swapped");
	expect_event(ep, EPOLLIN, 7, "blocking");
	CHECK(write(fd, "x", 1) == 1, "reply");
	/* The server closes: EPOLLRDHUP on the carried registration. */
	{
		char buf[8];

		CHECK(read(fd, buf, sizeof(buf)) == 5, "greeting");
		expect_event(ep, EPOLLRDHUP, 7, "peer close");
	}
	close(fd);
	close(ep);
}

static void cases(uint16_t port)
{
	case_nonblocking(port);
	case_blocking(port);
}

int main(int argc, char **argv)
{
	(void)argc;
	return t_run_served(argv, server, cases, CASES);
}
