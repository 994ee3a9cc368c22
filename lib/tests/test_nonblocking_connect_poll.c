/* SPDX-License-Identifier: MIT */
/* Description: non-blocking connect (EINPROGRESS) is decided when the program observes completion: poll(POLLOUT)+SO_ERROR, poll(POLLIN) only with the server speaking first, or select then a direct write; O_NONBLOCK kept and no byte crosses TCP first */
/* Channels: unix host-tcp */
#include "shimtest.h"

#define CASES	3

/* Server (another process): greet, echo 4 bytes; exit status = non-swapped count. */
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
	CHECK(t_swapped(fd), "%s: not swapped (kernel family %d)", how, t_real_domain(fd));
	CHECK(fcntl(fd, F_GETFL) & O_NONBLOCK, "%s: O_NONBLOCK lost", how);
	expect(fd, "hello", how);
	CHECK(write(fd, "ping", 4) == 4, "%s: write", how);
	expect(fd, "ping", how);
	close(fd);
}

/* poll for POLLOUT, then SO_ERROR: the textbook way. */
static void case_pollout(uint16_t port)
{
	int fd = start_connect(port), err = -1;
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	socklen_t el = sizeof(err);

	CHECK(poll(&p, 1, 2000) == 1 && (p.revents & POLLOUT), "poll: revents %#x", p.revents);
	CHECK(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0, "SO_ERROR %d", err);
	finish(fd, "pollout");
}

/* The server speaks first; the client only ever waits for input. */
static void case_pollin_only(uint16_t port)
{
	int fd = start_connect(port);
	struct pollfd p = { .fd = fd, .events = POLLIN };

	CHECK(poll(&p, 1, 2000) == 1 && p.revents == POLLIN, "poll(POLLIN): revents %#x", p.revents);
	finish(fd, "pollin");
}

/* select() for writability, then write at once, without SO_ERROR: the write decides. */
static void case_select(uint16_t port)
{
	int fd = start_connect(port);
	struct timeval tv = { .tv_sec = 2 };
	fd_set w;

	FD_ZERO(&w);
	FD_SET(fd, &w);
	CHECK(select(fd + 1, NULL, &w, NULL, &tv) == 1 && FD_ISSET(fd, &w), "select");
	CHECK(write(fd, "ping", 4) == 4, "select: write");
	CHECK(t_swapped(fd), "select: not swapped (kernel family %d)", t_real_domain(fd));
	expect(fd, "helloping", "select");
	close(fd);
}

int main(int argc, char **argv)
{
	uint16_t port;
	int lfd;
	pid_t pid;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen(AF_INET, &port);
	pid = fork();
	if (pid == 0)
		_exit(server(lfd));
	case_pollout(port);
	case_pollin_only(port);
	case_select(port);
	t_wait_child(pid, "server (status = connections not swapped)");
	close(lfd);
	CHECK(t_agent_count("swap") == CASES, "%d swaps", t_agent_count("swap"));
	return t_shim_finish();
}
