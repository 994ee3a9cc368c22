/* SPDX-License-Identifier: MIT */
/* Description: a non-blocking connect is decided when ppoll (input only, server speaks first), pselect (writable, then sendmmsg) or epoll_pwait2 (EPOLLIN registered before connect) reports it, with the signal mask applied; O_NONBLOCK kept and no byte crosses TCP first */
/* Channels: unix host-tcp shm shm-link */
#include <sys/epoll.h>

#include "pending_connect.h"

static void case_ppoll(uint16_t port, const sigset_t *mask)
{
	int fd = pc_start_connect(port);
	struct pollfd p = { .fd = fd, .events = POLLIN };
	struct timespec ts = { .tv_sec = 2 };

	CHECK(ppoll(&p, 1, &ts, mask) == 1 && p.revents == POLLIN, "ppoll: revents %#x", p.revents);
	pc_finish(fd, "ppoll");
}

static void case_pselect(uint16_t port, const sigset_t *mask)
{
	int fd = pc_start_connect(port);
	struct timespec ts = { .tv_sec = 2 };
	char ping[] = "ping";
	struct iovec iov = { .iov_base = ping, .iov_len = 4 };
	struct mmsghdr mm = { .msg_hdr = { .msg_iov = &iov, .msg_iovlen = 1 } };
	fd_set w;

	FD_ZERO(&w);
	FD_SET(fd, &w);
	CHECK(pselect(fd + 1, NULL, &w, NULL, &ts, mask) == 1 && FD_ISSET(fd, &w), "pselect");
	CHECK(sendmmsg(fd, &mm, 1, 0) == 1 && mm.msg_len == 4, "pselect: sendmmsg");
	CHECK(t_swapped(fd), "pselect: not swapped");
	pc_expect(fd, "helloping", "pselect");
	close(fd);
}

static void case_epoll_pwait2(uint16_t port, const sigset_t *mask)
{
	int ep = epoll_create1(EPOLL_CLOEXEC), fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 5 };
	struct timespec ts = { .tv_sec = 2 };
	struct sockaddr_storage ss;
	socklen_t len = t_addr(AF_INET, &ss, port);

	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0, "epoll_ctl");
	CHECK(connect(fd, (void *)&ss, len) == -1 && errno == EINPROGRESS, "connect");
	CHECK(epoll_pwait2(ep, &ev, 1, &ts, mask) == 1 && (ev.events & EPOLLIN) && ev.data.u64 == 5,
	      "epoll_pwait2: events %#x data %llu", ev.events, (unsigned long long)ev.data.u64);
	close(ep);
	pc_finish(fd, "epoll_pwait2");
}

static void cases(uint16_t port)
{
	sigset_t mask;

	sigemptyset(&mask);
	sigaddset(&mask, SIGUSR1);
	case_ppoll(port, &mask);
	case_pselect(port, &mask);
	case_epoll_pwait2(port, NULL);
}

int main(int argc, char **argv)
{
	(void)argc;
	return pc_main(argv, cases);
}
