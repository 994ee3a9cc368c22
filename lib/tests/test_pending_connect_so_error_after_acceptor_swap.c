/* SPDX-License-Identifier: MIT */
/* Description: a burst of sequential non-blocking connects whose program reads SO_ERROR only after the acceptor has accepted (and so, over a link, already moved to the fast path and reset its TCP end), without a poll first, as a runtime's other thread does (tokio): SO_ERROR is 0, never ECONNRESET, and every connection carries its bytes */
/* Channels: unix shm shm-link host-tcp-link */
#include <poll.h>

#include "shimtest.h"

#define CONNS	60

static int server(int ctl)
{
	uint16_t port;
	int lfd = t_listen(AF_INET, &port), bad = 0;

	if (write(ctl, &port, sizeof(port)) != sizeof(port))
		return 1;
	for (int i = 0; i <= CONNS; i++) {
		int fd = accept(lfd, NULL, NULL);

		/* Accepted, and over a link already swapped: the connector may look now. */
		bad += fd < 0 || write(ctl, "a", 1) != 1 || write(fd, "hello", 5) != 5;
		close(fd);
	}
	return bad;
}

int main(int argc, char **argv)
{
	int ctl, reset = 0;
	pid_t pid;
	uint16_t port;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	port = t_fork_server(server, &ctl, &pid);
	{
		/* A first connection, blocking: with links, the later ones go over the link it brings. */
		int fd = t_connect(AF_INET, port);
		char c, buf[8];

		CHECK(read(ctl, &c, 1) == 1 && recv(fd, buf, 5, MSG_WAITALL) == 5, "the first connection");
		close(fd);
	}
	for (int i = 0; i < CONNS; i++) {
		struct sockaddr_storage ss;
		socklen_t len = t_addr(AF_INET, &ss, port), el = sizeof(int);
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), err = -1;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		char c, buf[8];

		CHECK(connect(fd, (void *)&ss, len) == -1 && errno == EINPROGRESS,
		      "connect %d: %s", i, strerror(errno));
		CHECK(read(ctl, &c, 1) == 1, "the server's accept %d", i);
		CHECK(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0, "SO_ERROR %d: %s", i,
		      strerror(errno));
		reset += err != 0;
		if (err) {
			fprintf(stderr, "connection %d: SO_ERROR %s\n", i, strerror(err));
		} else {
			CHECK(poll(&p, 1, 5000) == 1 && recv(fd, buf, 5, MSG_WAITALL) == 5 &&
			      !memcmp(buf, "hello", 5), "connection %d: the greeting", i);
		}
		close(fd);
	}
	CHECK(reset == 0, "%d of %d connects failed", reset, CONNS);
	t_wait_child(pid, "server (status = failures)");
	return t_shim_finish();
}
