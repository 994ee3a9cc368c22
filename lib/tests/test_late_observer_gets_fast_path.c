/* SPDX-License-Identifier: MIT */
/* Description: a program that looks at its non-blocking connect long after it completed (200 ms, past the agent's peer wait; the JVM's HttpClient looks ~170 ms late) still gets the fast path at both ends: the library decides the connect when it completes (settler.c); an epoll registration made before, edge-triggered, reports it on the new channel */
/* Channels: unix host-tcp shm shm-link host-tcp-link */
#include <sys/epoll.h>

#include "pending_connect.h"

#define LATE_US	200000

/* Registered edge-triggered before the connect completes, looked at late. */
static void case_epoll(uint16_t port)
{
	int fd = pc_start_connect(port), ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLET, .data.fd = fd };

	CHECK(!epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), "epoll_ctl");
	usleep(LATE_US);
	CHECK(epoll_wait(ep, &ev, 1, 2000) == 1 && (ev.events & EPOLLOUT), "epoll_wait: %#x",
	      ev.events);
	close(ep);
	pc_finish(fd, "epoll");
}

static void case_pollout(uint16_t port)
{
	int fd = pc_start_connect(port), err = -1;
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	socklen_t el = sizeof(err);

	usleep(LATE_US);
	CHECK(poll(&p, 1, 2000) == 1 && (p.revents & POLLOUT), "poll: revents %#x", p.revents);
	CHECK(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0, "SO_ERROR %d", err);
	pc_finish(fd, "pollout");
}

/* No wait at all: the first thing the program does, late, is a read. */
static void case_read(uint16_t port)
{
	int fd = pc_start_connect(port);

	usleep(LATE_US);
	pc_expect(fd, "hello", "read");
	CHECK(t_swapped(fd), "read: not swapped (kernel family %d)", t_real_domain(fd));
	CHECK(write(fd, "ping", 4) == 4, "read: write");
	pc_expect(fd, "ping", "read");
	close(fd);
}

static void cases(uint16_t port)
{
	case_epoll(port);
	case_pollout(port);
	case_read(port);
}

int main(int argc, char **argv)
{
	(void)argc;
	return pc_main(argv, cases);
}
