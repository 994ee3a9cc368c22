/* SPDX-License-Identifier: MIT */
/* Description: once the accepting process forks, a child that inherited its listener could accept a connection offered over a link, so the parent drops its accepting links at fork: the next connection is not set up over the old link but decided by the agent (both ends ask), swapped, data intact both ways; so is one whose offer was already on its way when the server forked, since nobody took that offer */
/* Channels: shm-link host-tcp-link */
#include <poll.h>

#include "shimtest.h"

#define N	(64u << 10)

/*
 * The connections, in order. The server forks right before saying go for
 * AFTER_FORK, and for IN_FLIGHT once that connection waits to be accepted
 * (so its connector is still waiting for its offer to be taken).
 */
enum conn { GIVES_LINK, AFTER_FORK, IN_FLIGHT, CONNS };


/* A child that inherits the listener and lives on while the next connection is made. */
static pid_t fork_holder(void)
{
	pid_t pid = fork();

	if (pid == 0) {
		usleep(100 * 1000);
		_exit(0);
	}
	return pid;
}

int main(int argc, char **argv)
{
	pid_t pid, holder[CONNS] = { 0 };
	int go, lfd, fd;
	uint16_t port;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen(AF_INET, &port);
	pid = t_fork_ctl(&go);
	if (pid == 0) {
		_exit(t_paced_client(go, port, CONNS, N));
	}
	for (int i = 0; i < CONNS; i++) {
		struct pollfd p = { .fd = lfd, .events = POLLIN };
		int asks = t_agent_count("ask");

		if (i == AFTER_FORK)
			holder[i] = fork_holder();
		CHECK(write(go, "g", 1) == 1, "go %d", i);
		if (i == IN_FLIGHT) {
			CHECK(poll(&p, 1, 5000) == 1, "connection %d never arrived", i);
			holder[i] = fork_holder();
		}
		fd = accept(lfd, NULL, NULL);
		CHECK(fd >= 0, "accept %d: %s", i, strerror(errno));
		CHECK(t_swapped(fd), "server connection %d not swapped", i);
		t_exchange_nth(fd, i, N, 0);
		close(fd);
		/* Each after a fork: decided by the agent, which the first was anyway. */
		CHECK(t_agent_count("ask") == asks + 2,
		      "connection %d: %d asks, not 2: it was not decided by the agent", i,
		      t_agent_count("ask") - asks);
		if (holder[i])
			t_wait_child(holder[i], "the forked child holding the listener");
	}
	t_wait_child(pid, "client");
	close(lfd);
	CHECK(t_agent_count(t_link_swap()) == CONNS, "%d swaps, not %d", t_agent_count(t_link_swap()),
	      CONNS);
	CHECK(t_agent_await("closed", 2 * CONNS) == 2 * CONNS, "%d CLOSED",
	      t_agent_count("closed"));
	CHECK(t_ledger_ends(0) == 0, "%d linked ends: a connection was decided over a link",
	      t_ledger_ends(0));
	return t_shim_finish();
}
