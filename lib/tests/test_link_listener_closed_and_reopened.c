/* SPDX-License-Identifier: MIT */
/* Description: a server that closes its listener and listens again on the same port drops the links of the old listener with it: the next connection, though its connector still holds a link to that port, is decided by the agent (which hands a new link, used by the one after), all swapped with data intact both ways, and the server holds no more fds than before */
/* Channels: shm-link host-tcp-link */
#include "shimtest.h"

#define N	(64u << 10)

/* The connections, in order: the server listens again before RELISTENED. */
enum conn { GIVES_LINK, RELISTENED, OVER_NEW_LINK, CONNS };


int main(int argc, char **argv)
{
	int go, lfd, fd, fds = 0, asks = 0;
	uint16_t port;
	pid_t pid;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen(AF_INET, &port);
	pid = t_fork_ctl(&go);
	if (pid == 0) {
		close(lfd);	/* else closing the server's would not end the listener */
		_exit(t_paced_client(go, port, CONNS, N));
	}
	for (int i = 0; i < CONNS; i++) {
		if (i == RELISTENED) {
			/* The listener and the link of its first connection. */
			fds = t_count_fds();
			asks = t_agent_count("ask");
			close(lfd);
			lfd = t_listen_at(AF_INET, port, &port);
		}
		CHECK(write(go, "g", 1) == 1, "go %d", i);
		fd = accept(lfd, NULL, NULL);
		CHECK(fd >= 0, "accept %d: %s", i, strerror(errno));
		CHECK(t_swapped(fd), "server connection %d not swapped", i);
		t_exchange_nth(fd, i, N, 0);
		close(fd);
		if (i == RELISTENED)
			CHECK(t_agent_count("ask") == asks + 2,
			      "%d asks, not 2: the connection went over the closed listener's link",
			      t_agent_count("ask") - asks);
	}
	/*
	 * The new listener and the new link in place of the old ones; cross
	 * host, the new link also holds its stock (one fill, one of it used),
	 * the process its links' epoll set, and the overlay socket of the last
	 * linked connection, to reset at its next accept().
	 */
	CHECK(t_count_fds() == fds + (fa_xlink() ? 17 : 0), "%d fds, %d before the listener was closed",
	      t_count_fds(), fds);
	t_wait_child(pid, "client");
	close(lfd);
	CHECK(t_agent_count("ask") == asks + 2, "%d asks after listening again, not 2",
	      t_agent_count("ask") - asks);
	CHECK(t_agent_count(t_link_grant()) == 2, "%d swaps with a link, not 2",
	      t_agent_count(t_link_grant()));
	CHECK(t_ledger_await(0, 2) == 2, "%d linked ends, not 2: only connection %d "
	      "goes over a link", t_ledger_ends(0), OVER_NEW_LINK);
	return t_shim_finish();
}
