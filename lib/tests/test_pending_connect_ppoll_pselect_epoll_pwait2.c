/* SPDX-License-Identifier: MIT */
/* Description: a non-blocking connect is decided when ppoll (input only, server speaks first), pselect (writable, then sendmmsg) or epoll_pwait2 (EPOLLIN registered before connect) reports it, with the signal mask applied; O_NONBLOCK kept and no byte crosses TCP first */
/* Channels: unix host-tcp */
#include <sys/epoll.h>

#include "shimtest.h"

#define CASES	3

/* Server (another process): greet, echo 4 bytes; exit status = failures. */
static int server(int lfd)
{
	int bad = 0;

	for (int i = 0; i < CASES; i++) {
		int fd = accept(lfd, NULL, NULL);
		char buf[4];

		bad += !t_swapped(fd);
		if (write(fd, "hello", 5) != 5 || recv(fd, buf, 4, MSG_WAITALL) != 4 ||
		    write(fd, buf, 4) != 4)
			bad++;
		close(fd);
	}
	return bad;
}

static int start_connect(uint16_t port)
{
	struct sockaddr_storage ss;
	socklen_t len = t_addr(AF_INET, &ss, port);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int ret = connect(fd, (void *)&ss, len);

	CHECK(ret == -1 && errno == EINPROGRESS, "connect gave %d (%s)", ret, strerror(errno));
	return fd;
}

/* Read exactly strlen(want) bytes from a non-blocking fd. */
static void expect(int fd, const char *want, const char *how)
{
	size_t n = strlen(want), got = 0;
	char buf[16];

	while (got < n) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, 2000) != 1)
			break;
		r = read(fd, buf + got, n - got);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	CHECK(got == n && !memcmp(buf, want, n), "%s: read %zu bytes, want \"%s\"", how, got, want);
}

static void finish(int fd, const char *how)
{
	CHECK(t_swapped(fd), "%s: not swapped", how);
	CHECK(fcntl(fd, F_GETFL) & O_NONBLOCK, "%s: O_NONBLOCK lost", how);
	expect(fd, "hello", how);
	CHECK(write(fd, "ping", 4) == 4, "%s: write", how);
	expect(fd, "ping", how);
	close(fd);
}

static void case_ppoll(uint16_t port, const sigset_t *mask)
{
	int fd = start_connect(port);
	struct pollfd p = { .fd = fd, .events = POLLIN };
	struct timespec ts = { .tv_sec = 2 };

	CHECK(ppoll(&p, 1, &ts, mask) == 1 && p.revents == POLLIN, "ppoll: revents %#x", p.revents);
	finish(fd, "ppoll");
}

static void case_pselect(uint16_t port, const sigset_t *mask)
{
	int fd = start_connect(port);
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
	expect(fd, "helloping", "pselect");
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
	finish(fd, "epoll_pwait2");
}

int main(int argc, char **argv)
{
	uint16_t port;
	sigset_t mask;
	int lfd;
	pid_t pid;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	sigemptyset(&mask);
	sigaddset(&mask, SIGUSR1);
	lfd = t_listen(AF_INET, &port);
	pid = fork();
	if (pid == 0)
		_exit(server(lfd));
	case_ppoll(port, &mask);
	case_pselect(port, &mask);
	case_epoll_pwait2(port, NULL);
	t_wait_child(pid, "server (status = failures)");
	close(lfd);
	CHECK(t_agent_count("swap") == CASES, "%d swaps", t_agent_count("swap"));
	return t_shim_finish();
}
