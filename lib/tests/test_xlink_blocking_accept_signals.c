/* SPDX-License-Identifier: MIT */
/* Description: a blocking accept() on a listener with a cross-host link waits on the link too (answering offers early), yet keeps accept()'s signal semantics: a handler installed without SA_RESTART makes it return EINTR, one with SA_RESTART lets it go on and return the next connection, which is then set up over the link, swapped, data intact both ways */
/* Channels: host-tcp-link */
#include "shimtest.h"

#define N	(64u << 10)

enum conn { GIVES_LINK, AFTER_RESTART, CONNS };

static int client(int go, uint16_t port)
{
	return t_paced_client(go, port, CONNS, N);
}

int main(int argc, char **argv)
{
	int go, lfd, fd;
	pid_t pid;

	(void)argc;
	setenv("FF_TEST_LINK_TTL", "60000", 1);
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen_fork(client, &go, &pid);
	t_paced_accept(lfd, go, GIVES_LINK, N);

	/* Nothing comes: the signal must end the wait as it would end accept(). */
	t_alarm_soon(0, -1);
	fd = accept(lfd, NULL, NULL);
	CHECK(fd < 0 && errno == EINTR && t_caught == 1, "accept without SA_RESTART: %d, %s, %d signals",
	      fd, strerror(errno), (int)t_caught);

	/* With SA_RESTART it goes on, and the connection that comes after is linked. */
	t_alarm_soon(SA_RESTART, go);
	fd = accept(lfd, NULL, NULL);
	CHECK(fd >= 0, "accept with SA_RESTART: %s", strerror(errno));
	CHECK(t_swapped(fd), "connection %d not swapped", AFTER_RESTART);
	t_exchange_nth(fd, AFTER_RESTART, N, 0);
	close(fd);
	CHECK(t_caught == 2, "%d signals, not 2", (int)t_caught);
	t_wait_child(pid, "client");
	close(lfd);
	CHECK(t_agent_count("ask") == 2, "%d asks, not 2: connection %d was not linked",
	      t_agent_count("ask"), AFTER_RESTART);
	CHECK(t_ledger_await(0, 2) == 2, "%d linked ends, not 2", t_ledger_ends(0));
	return t_shim_finish();
}
