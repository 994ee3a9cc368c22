/* SPDX-License-Identifier: MIT */
/* Description: two link offers in a row not taken in time (another process of the listener accepted the connections: forked workers that all accept) end that link at the connector: its next connection asks the agent instead of offering again over a link whose offers go unanswered (each cost 5 ms; half of a client's connections to nginx with 2 workers paid it until the link's 2 s were over); the agent here grants one link only, as the real one stops once a second process accepts; data intact on every connection */
/* Channels: shm-link */
#include <poll.h>

#include "shimtest.h"

#define N	(64u << 10)

enum conn { GIVES_LINK, NOT_TAKEN, NOT_TAKEN_AGAIN, AFTER, CONNS };

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
		if (i == NOT_TAKEN || i == NOT_TAKEN_AGAIN)
			CHECK(t_agent_await("ask", 2 * i + 1) >= 2 * i + 1,
			      "connection %d: the connector never asked the agent (%d asks)", i,
			      t_agent_count("ask"));
		fd = accept(lfd, NULL, NULL);
		CHECK(fd >= 0 && t_swapped(fd), "accepted connection %d is not swapped", i);
		t_exchange_nth(fd, i, N, 0);
		close(fd);
		CHECK(read(ctl, &n, 1) == 1 && write(ctl, "g", 1) == 1, "the client went away");
		/* Withdrawn, not taken late: both ends asked the agent. */
		if (i == NOT_TAKEN)
			CHECK(t_agent_count("ask") == 4, "%d asks after the first offer not taken, not 4",
			      t_agent_count("ask"));
	}
	CHECK(t_agent_count("swap shm link") == 1, "%d links granted, not 1",
	      t_agent_count("swap shm link"));
	/* Two asks for each connection the agent decided: all but none, once the link ended. */
	CHECK(t_agent_await("ask", 2 * CONNS) == 2 * CONNS,
	      "the agent decided %d connection ends, not %d: the connection after two offers not "
	      "taken was offered over the same link again", t_agent_count("ask"), 2 * CONNS);
	t_wait_child(pid, "client");
	return t_exit_code();
}
