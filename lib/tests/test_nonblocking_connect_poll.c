/* SPDX-License-Identifier: MIT */
/* Description: non-blocking connect (EINPROGRESS) is decided when the program observes completion: poll(POLLOUT)+SO_ERROR, poll(POLLIN) only with the server speaking first, or select then a direct write; O_NONBLOCK kept and no byte crosses TCP first */
/* Channels: unix host-tcp shm shm-link */
#include "pending_connect.h"

/* poll for POLLOUT, then SO_ERROR: the textbook way. */
static void case_pollout(uint16_t port)
{
	int fd = pc_start_connect(port), err = -1;
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	socklen_t el = sizeof(err);

	CHECK(poll(&p, 1, 2000) == 1 && (p.revents & POLLOUT), "poll: revents %#x", p.revents);
	CHECK(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0, "SO_ERROR %d", err);
	pc_finish(fd, "pollout");
}

/* The server speaks first; the client only ever waits for input. */
static void case_pollin_only(uint16_t port)
{
	int fd = pc_start_connect(port);
	struct pollfd p = { .fd = fd, .events = POLLIN };

	CHECK(poll(&p, 1, 2000) == 1 && p.revents == POLLIN, "poll(POLLIN): revents %#x", p.revents);
	pc_finish(fd, "pollin");
}

/* select() for writability, then write at once, without SO_ERROR: the write decides. */
static void case_select(uint16_t port)
{
	int fd = pc_start_connect(port);
	struct timeval tv = { .tv_sec = 2 };
	fd_set w;

	FD_ZERO(&w);
	FD_SET(fd, &w);
	CHECK(select(fd + 1, NULL, &w, NULL, &tv) == 1 && FD_ISSET(fd, &w), "select");
	CHECK(write(fd, "ping", 4) == 4, "select: write");
	CHECK(t_swapped(fd), "select: not swapped (kernel family %d)", t_real_domain(fd));
	pc_expect(fd, "helloping", "select");
	close(fd);
}

static void cases(uint16_t port)
{
	case_pollout(port);
	case_pollin_only(port);
	case_select(port);
}

int main(int argc, char **argv)
{
	(void)argc;
	return pc_main(argv, cases);
}
