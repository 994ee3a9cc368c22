/* SPDX-License-Identifier: MIT */
/* Description: a link offer not taken in time (another process of the listener accepted the connection, or the acceptor is slow) ends that link at the connector: its next connection asks the agent instead of offering again over a link whose offers go unanswered (each cost 5 ms; with forked workers that all accept, half of a client's connections paid it until the link's 2 s were over); the agent here grants one link only, as the real one stops once a second process accepts; data intact on every connection */
/* Channels: shm-link */
#include <poll.h>

#include "shimtest.h"

#define N	(64u << 10)

enum conn { GIVES_LINK, NOT_TAKEN, AFTER, CONNS };

static int client(int ctl, uint16_t port)
{
	for (int i = 0; i < CONNS; i++) {
		int fd = t_connect(AF_INET, port);
		char go;

		CHECK(t_swapped(fd), "connection %d is not swapped", i);
		t_exchange_nth(fd, i, N, 1);
		close(fd);
		if (write(ctl, "n", 1) != 1 || read(ctl, &go, 1) != 1)
			return 1;
	}
	return t_exit_code();
}

int main(int argc, char **argv)
{
	int ctl, lfd, fd;
	uint16_t port;
	pid_t pid;

	(void)argc;
	setenv("FF_TEST_LINK_ONCE", "1", 1);
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen(AF_INET, &port);
	pid = t_fork_ctl(&ctl);
	if (pid == 0)
		_exit(client(ctl, port));
	for (int i = 0; i < CONNS; i++) {
		struct pollfd p = { .fd = lfd, .events = POLLIN };
		char n;

		CHECK(poll(&p, 1, 5000) == 1, "connection %d never arrived", i);
		/* Late by construction: accept() once the connector gave up its offer and asked the agent. */
		if (i == NOT_TAKEN)
			CHECK(t_agent_await("ask", 3) >= 3, "the connector never asked the agent (%d asks)",
			      t_agent_count("ask"));
		fd = accept(lfd, NULL, NULL);
		CHECK(fd >= 0 && t_swapped(fd), "accepted connection %d is not swapped", i);
		t_exchange_nth(fd, i, N, 0);
		close(fd);
		CHECK(read(ctl, &n, 1) == 1 && write(ctl, "g", 1) == 1, "the client went away");
	}
	/* Two asks for each connection the agent decided: the first, the one not taken, and the next. */
	CHECK(t_agent_await("ask", 6) == 6,
	      "the agent decided %d connection ends, not 6: the connection after the offer not taken "
	      "was offered over the same link again", t_agent_count("ask"));
	t_wait_child(pid, "client");
	return t_exit_code();
}
