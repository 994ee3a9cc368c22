/* SPDX-License-Identifier: MIT */
/* Description: a single-threaded program opens two non-blocking connects to its own listener and only then accepts them (an event loop that serves and connects to itself): the second connect() does not wait for the first one's answer, which only this thread's accept() could bring (it blocked 50 ms and the first connection fell to the overlay), and both connections reach shm at both ends with their bytes intact */
/* Channels: shm-link */
#include <poll.h>

#include "shimtest.h"

int main(int argc, char **argv)
{
	struct sockaddr_storage ss;
	socklen_t len;
	uint16_t port;
	int lfd, fds[2], acc[2];
	char c;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen(AF_INET, &port);
	len = t_addr(AF_INET, &ss, port);
	for (int i = 0; i < 2; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		CHECK(!connect(fds[i], (void *)&ss, len) || errno == EINPROGRESS, "connect %d: %s", i,
		      strerror(errno));
	}
	for (int i = 0; i < 2; i++) {
		struct pollfd p = { .fd = fds[i], .events = POLLOUT };

		acc[i] = accept(lfd, NULL, NULL);
		CHECK(acc[i] >= 0, "accept %d: %s", i, strerror(errno));
		CHECK(poll(&p, 1, 5000) == 1, "connect %d never completed", i);
	}
	for (int i = 0; i < 2; i++) {
		CHECK(t_swapped(fds[i]) && t_swapped(acc[i]),
		      "connection %d: connector swapped %d, acceptor swapped %d", i, t_swapped(fds[i]),
		      t_swapped(acc[i]));
		CHECK(write(fds[i], "xy", 2) == 2 && read(acc[i], &c, 1) == 1 && c == 'x',
		      "connection %d: a byte lost", i);
		close(fds[i]);
		close(acc[i]);
	}
	close(lfd);
	return t_shim_finish();
}
