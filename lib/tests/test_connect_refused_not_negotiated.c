/* SPDX-License-Identifier: MIT */
/* Description: a connect that is refused (blocking; non-blocking seen through poll+SO_ERROR, a read, or epoll) reports ECONNREFUSED to the program exactly as TCP does, at once, and never asks the agent */
#include "shimtest.h"

/* A loopback port nobody listens on (bound then released). */
static uint16_t closed_port(void)
{
	struct sockaddr_storage ss;
	socklen_t len = t_addr(AF_INET, &ss, 0);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	uint16_t port;

	if (bind(fd, (void *)&ss, len) || getsockname(fd, (void *)&ss, &len))
		exit(T_EXIT_FAIL);
	port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	close(fd);
	return port;
}

/* A non-blocking connect: -1 with EINPROGRESS, or ECONNREFUSED at once (loopback). */
static int start(uint16_t port, int *refused)
{
	struct sockaddr_storage ss;
	socklen_t len = t_addr(AF_INET, &ss, port);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int r = connect(fd, (void *)&ss, len);

	CHECK(r == -1 && (errno == EINPROGRESS || errno == ECONNREFUSED),
	      "non-blocking connect: %d (%s)", r, strerror(errno));
	*refused = r == -1 && errno == ECONNREFUSED;
	return fd;
}

static int so_error(int fd)
{
	int err = -1;
	socklen_t l = sizeof(err);

	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l))
		return -1;
	return err;
}

static void case_poll(uint16_t port)
{
	int refused, fd = start(port, &refused);
	struct pollfd p = { .fd = fd, .events = POLLOUT };

	if (!refused) {
		CHECK(poll(&p, 1, 2000) == 1 && (p.revents & (POLLERR | POLLHUP)),
		      "poll: revents %#x", p.revents);
		CHECK(so_error(fd) == ECONNREFUSED, "poll: SO_ERROR %d", so_error(fd));
	}
	CHECK(so_error(fd) == 0, "SO_ERROR not cleared by reading it");
	close(fd);
}

static void case_read(uint16_t port)
{
	int refused, fd = start(port, &refused);
	char c;
	ssize_t r = -1;

	for (int i = 0; !refused && i < 200; i++) {
		r = read(fd, &c, 1);
		if (!(r == -1 && errno == EAGAIN))
			break;
		usleep(1000);
	}
	CHECK(refused || (r == -1 && errno == ECONNREFUSED), "read: %zd (%s)", r, strerror(errno));
	close(fd);
}

/* Registered before connect, as event loops do. */
static void case_epoll(uint16_t port)
{
	int ep = epoll_create1(EPOLL_CLOEXEC), fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 9 };
	struct sockaddr_storage ss;
	socklen_t len = t_addr(AF_INET, &ss, port);
	int r;

	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0, "epoll_ctl");
	r = connect(fd, (void *)&ss, len);
	if (r == -1 && errno == EINPROGRESS) {
		CHECK(epoll_wait(ep, &ev, 1, 2000) == 1 && (ev.events & EPOLLERR) && ev.data.u64 == 9,
		      "epoll: events %#x", ev.events);
		CHECK(so_error(fd) == ECONNREFUSED, "epoll: SO_ERROR %d", so_error(fd));
	} else {
		CHECK(r == -1 && errno == ECONNREFUSED, "connect: %d (%s)", r, strerror(errno));
	}
	close(fd);
	close(ep);
}

int main(int argc, char **argv)
{
	struct sockaddr_storage ss;
	uint16_t port;
	socklen_t len;
	int64_t t0;
	int fd, r;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	port = closed_port();
	len = t_addr(AF_INET, &ss, port);
	t0 = t_ms();
	fd = socket(AF_INET, SOCK_STREAM, 0);
	r = connect(fd, (void *)&ss, len);
	CHECK(r == -1 && errno == ECONNREFUSED, "blocking connect: %d (%s)", r, strerror(errno));
	close(fd);
	case_poll(port);
	case_read(port);
	case_epoll(port);
	CHECK(t_ms() - t0 < T_NO_WAIT_MS + T_SLACK_MS, "took %lld ms", (long long)(t_ms() - t0));
	CHECK(t_agent_count("ask") == 0, "the agent was asked %d times about refused connects",
	      t_agent_count("ask"));
	return t_shim_finish();
}
