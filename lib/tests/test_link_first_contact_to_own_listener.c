/* SPDX-License-Identifier: MIT */
/* Description: a single-threaded program opens two non-blocking connects to its own listener and only then accepts them (an event loop that serves and connects to itself), the listener at that address or at any address: the second connect() does not wait for the first one's answer, which only this thread's accept() could bring (it blocked 50 ms and the first connection fell to the overlay), and both connections reach shm at both ends with their bytes intact */
/* Channels: shm-link */
#include <poll.h>

#include "shimtest.h"

/* The case with the listener at addr (any or the destination's), then the connects to 127.0.0.1. */
static void own_listener(in_addr_t addr)
{
	struct sockaddr_storage ss;
	socklen_t len = t_addr(AF_INET, &ss, 0);
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), fds[2], acc[2], one = 1;
	const char *at = addr == INADDR_ANY ? "any address" : "its address";
	char c;

	((struct sockaddr_in *)(void *)&ss)->sin_addr.s_addr = htonl(addr);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (void *)&ss, len) || listen(lfd, 4) || getsockname(lfd, (void *)&ss, &len)) {
		perror("listen");
		exit(T_EXIT_FAIL);
	}
	((struct sockaddr_in *)(void *)&ss)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (int i = 0; i < 2; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		CHECK(!connect(fds[i], (void *)&ss, len) || errno == EINPROGRESS, "%s: connect %d: %s",
		      at, i, strerror(errno));
	}
	for (int i = 0; i < 2; i++) {
		struct pollfd p = { .fd = fds[i], .events = POLLOUT };

		acc[i] = accept(lfd, NULL, NULL);
		CHECK(acc[i] >= 0, "%s: accept %d: %s", at, i, strerror(errno));
		CHECK(poll(&p, 1, 5000) == 1, "%s: connect %d never completed", at, i);
	}
	for (int i = 0; i < 2; i++) {
		CHECK(t_swapped(fds[i]) && t_swapped(acc[i]),
		      "listener at %s, connection %d: connector swapped %d, acceptor swapped %d", at, i,
		      t_swapped(fds[i]), t_swapped(acc[i]));
		CHECK(write(fds[i], "xy", 2) == 2 && read(acc[i], &c, 1) == 1 && c == 'x',
		      "%s, connection %d: a byte lost", at, i);
		close(fds[i]);
		close(acc[i]);
	}
	close(lfd);
}

int main(int argc, char **argv)
{
	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	own_listener(INADDR_LOOPBACK);
	own_listener(INADDR_ANY);
	return t_shim_finish();
}
