/* SPDX-License-Identifier: MIT */
/* Description: after a first cross-host connection through the agent grants a cross-host link, the same two processes set up further connections over stock connections without asking the agent (blocking and non-blocking connect), the stock filled FILL_COUNT at a time, data intact both ways, each end listed in its process's ledger while open and no longer once closed */
/* Channels: host-tcp-link */
#include "shimtest.h"

#define CONNS	40
#define N	(64u << 10)

static int client(uint16_t port)
{
	for (int i = 0; i < CONNS; i++) {
		int fd = t_connect_nth(port, i);

		CHECK(t_swapped(fd), "connection %d not swapped (kernel family %d)", i,
		      t_real_domain(fd));
		t_exchange_nth(fd, i, N, 1);
		close(fd);
	}
	return t_exit_code();
}

int main(int argc, char **argv)
{
	int linked, asked;

	(void)argc;
	/* A link lasts the whole test, however slow the machine: expiry has its own test. */
	setenv("FF_TEST_LINK_TTL", "60000", 1);
	t_shim_setup(argv, FA_BROKER);
	t_serve_sequence(client, CONNS, N);
	/*
	 * Only the first connection is asked about (one CONNECT, one ACCEPT),
	 * unless a busy machine kept an acceptor from taking an offer within
	 * its 5 ms: that one goes through the agent, and grants a new link.
	 * Every other one is linked, and listed in both ends' ledgers.
	 */
	linked = t_ledger_await(0, 2 * (CONNS - 1)) / 2;
	asked = CONNS - linked;
	CHECK(linked >= CONNS * 3 / 4, "only %d of %d connections linked", linked, CONNS);
	CHECK(t_agent_count("ask") == 2 * asked, "%d asks, not %d", t_agent_count("ask"), 2 * asked);
	CHECK(t_agent_count("swap xlink") == asked, "%d grants, not %d", t_agent_count("swap xlink"),
	      asked);
	/* Linked connections come from fills of 16, asked for when the stock is down to 8. */
	CHECK(t_agent_count("fill 16") >= 1 + (linked - 1) / 16, "%d fills for %d linked connections",
	      t_agent_count("fill 16"), linked);
	CHECK(t_ledger_ends(1) == 0, "%d linked ends still listed after every close",
	      t_ledger_ends(1));
	/* The agent hears CLOSED only of the connection it answered. */
	CHECK(t_agent_await("closed", 2 * asked) == 2 * asked, "%d CLOSED", t_agent_count("closed"));
	return t_shim_finish();
}
