/* SPDX-License-Identifier: MIT */
/* Description: a process with no link yet starts a burst of non-blocking connects to one listener, back to back, as an event loop opening a pool does; only the first is decided by the agent, and the others, whose SYNs wait for its answer, go over the link it brought: one CONNECT and one ACCEPT at the agent, every connection on shm with its data intact both ways; so also when the client listens on that port itself at any address (a server calling its peers on the port it serves), which is not its own listener's address */
/* Channels: shm-link */
#include <poll.h>

#include "shimtest.h"

#define CONNS	8
#define N	(64u << 10)

/* The server's address: another than the client's own (127.0.0.1), as another container's is. */
static socklen_t server_addr(struct sockaddr_storage *ss, uint16_t port)
{
	socklen_t len = t_addr(AF_INET, ss, port);

	((struct sockaddr_in *)(void *)ss)->sin_addr.s_addr = htonl(0x7f000002);
	return len;
}

/* A listener of the client's on the server's port, at any (IPv6) address. */
static int listen_any(uint16_t port)
{
	struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_addr = in6addr_any,
				  .sin6_port = htons(port) };
	int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	CHECK(fd >= 0 && !setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) &&
	      !bind(fd, (void *)&a, sizeof(a)) && !listen(fd, 4), "the client's own listener: %s",
	      strerror(errno));
	return fd;
}

static int client(uint16_t port)
{
	struct sockaddr_storage ss;
	socklen_t len = server_addr(&ss, port);
	int fds[CONNS], own = listen_any(port);

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
	close(own);
	return t_exit_code();
}

int main(int argc, char **argv)
{
	struct sockaddr_storage ss;
	socklen_t len;
	uint16_t port;
	int lfd;
	pid_t pid;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	len = server_addr(&ss, 0);
	if (lfd < 0 || bind(lfd, (void *)&ss, len) || listen(lfd, 16) ||
	    getsockname(lfd, (void *)&ss, &len)) {
		perror("listen");
		return T_EXIT_FAIL;
	}
	port = ntohs(((struct sockaddr_in *)(void *)&ss)->sin_port);
	pid = fork();
	if (pid == 0) {
		/* A client, not a process that could accept its own connections (contact.c). */
		close(lfd);
		_exit(client(port));
	}
	t_serve_accepts(lfd, CONNS, N);
	t_wait_child(pid, "client");
	close(lfd);
	CHECK(t_agent_count("ask") == 2,
	      "%d asks, not 2: the connects after the first did not wait for its link", t_agent_count("ask"));
	CHECK(t_agent_count("swap shm link") == 1, "%d swaps with a link",
	      t_agent_count("swap shm link"));
	return t_shim_finish();
}
