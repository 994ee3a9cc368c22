/* SPDX-License-Identifier: MIT */
/*
 * Shared by the tests of a non-blocking connect still pending when the
 * program next uses the socket (test_nonblocking_connect_poll.c,
 * test_pending_connect_*.c): the server they all talk to, the connect, and
 * the checks once a wait has reported the connect decided. Each test has
 * PC_CASES cases, one connection (and so one swap) each.
 */
#ifndef FREEFLOW_PENDING_CONNECT_H
#define FREEFLOW_PENDING_CONNECT_H

#include <poll.h>

#include "shimtest.h"

#define PC_CASES	3

/* The server's side of one connection, accepted as fd: greet, echo 4 bytes, close; 0 or 1 failure. */
static inline int pc_serve(int fd)
{
	char buf[4];
	int bad = fd < 0 || write(fd, "hello", 5) != 5 || recv(fd, buf, 4, MSG_WAITALL) != 4 ||
		  write(fd, buf, 4) != 4;

	close(fd);
	return bad;
}

/* Server (another process): PC_CASES connections, each swapped and served; exit status = failures. */
static inline int pc_server(int lfd)
{
	int bad = 0;

	for (int i = 0; i < PC_CASES; i++) {
		int fd = accept(lfd, NULL, NULL);

		bad += !t_swapped(fd);
		bad += pc_serve(fd);
	}
	return bad;
}

/* Non-blocking connect, then nothing that could decide it. */
static inline int pc_start_connect(uint16_t port)
{
	struct sockaddr_storage ss;
	socklen_t len = t_addr(AF_INET, &ss, port);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int ret = connect(fd, (void *)&ss, len);

	CHECK(ret == -1 && errno == EINPROGRESS, "connect gave %d (%s)", ret, strerror(errno));
	return fd;
}

/* Read exactly strlen(want) bytes from a non-blocking fd. */
static inline void pc_expect(int fd, const char *want, const char *how)
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

/* After the wait: swapped, still non-blocking, greeting and echo intact. */
static inline void pc_finish(int fd, const char *how)
{
	CHECK(t_swapped(fd), "%s: not swapped (kernel family %d)", how, t_real_domain(fd));
	CHECK(fcntl(fd, F_GETFL) & O_NONBLOCK, "%s: O_NONBLOCK lost", how);
	pc_expect(fd, "hello", how);
	CHECK(write(fd, "ping", 4) == 4, "%s: write", how);
	pc_expect(fd, "ping", how);
	close(fd);
}

/* main() of these tests: cases(port) runs every case against pc_server. */
static inline int pc_main(char **argv, void (*cases)(uint16_t port))
{
	return t_run_served(argv, pc_server, cases, PC_CASES);
}

#endif
