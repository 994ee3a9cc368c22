/* SPDX-License-Identifier: MIT */
/* Description: a process with no link yet starts a burst of non-blocking connects to one listener, back to back, as an event loop opening a pool does; only the first is decided by the agent, and the others, whose SYNs wait for its answer, go over the link it brought: one CONNECT and one ACCEPT at the agent, every connection on shm with its data intact both ways */
/* Channels: shm-link */
#include <poll.h>

#include "shimtest.h"

#define CONNS	8
#define N	(64u << 10)

static int client(uint16_t port)
{
	struct sockaddr_storage ss;
	socklen_t len = t_addr(AF_INET, &ss, port);
	int fds[CONNS];

	for (int i = 0; i < CONNS; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		CHECK(fds[i] >= 0 && (!connect(fds[i], (void *)&ss, len) || errno == EINPROGRESS),
		      "connect %d: %s", i, strerror(errno));
	}
	for (int i = 0; i < CONNS; i++) {
		struct pollfd p = { .fd = fds[i], .events = POLLOUT };
		int err = 0;
		socklen_t el = sizeof(err);

		CHECK(poll(&p, 1, 5000) == 1, "connect %d never completed", i);
		CHECK(!getsockopt(fds[i], SOL_SOCKET, SO_ERROR, &err, &el) && !err, "connect %d: %s", i,
		      strerror(err));
		fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) & ~O_NONBLOCK);
		CHECK(t_swapped(fds[i]), "connection %d not swapped (kernel family %d)", i,
		      t_real_domain(fds[i]));
		t_exchange_nth(fds[i], i, N, 1);
		close(fds[i]);
	}
	return t_exit_code();
}

int main(int argc, char **argv)
{
	uint16_t port;
	int lfd, fd;
	pid_t pid;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen(AF_INET, &port);
	pid = fork();
	if (pid == 0) {
		/* A client, not a process that could accept its own connections. */
		close(lfd);
		_exit(client(port));
	}
	for (int i = 0; i < CONNS; i++) {
		fd = accept(lfd, NULL, NULL);
		CHECK(fd >= 0, "accept %d: %s", i, strerror(errno));
		CHECK(t_swapped(fd), "server connection %d not swapped", i);
		t_exchange_nth(fd, i, N, 0);
		close(fd);
	}
	t_wait_child(pid, "client");
	close(lfd);
	CHECK(t_agent_count("ask") == 2,
	      "%d asks, not 2: the connects after the first did not wait for its link", t_agent_count("ask"));
	CHECK(t_agent_count("swap shm link") == 1, "%d swaps with a link",
	      t_agent_count("swap shm link"));
	return t_shim_finish();
}
