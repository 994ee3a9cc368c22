/* SPDX-License-Identifier: MIT */
/* Description: after a first connection through the agent hands a link, the same two processes set up further connections over the link without asking the agent (blocking and non-blocking connect), each on its own shm channel, data intact both ways, and each end is listed in its process's ledger (one per process, given to the agent) while it is open, and no longer once closed */
/* Channels: shm-link */
#include "shimtest.h"

#define CONNS	6
#define N	(256u << 10)

static int client(uint16_t port)
{
	for (int i = 0; i < CONNS; i++) {
		int fd = t_connect_nth(port, i);

		CHECK(t_swapped(fd), "connection %d not swapped (kernel family %d)", i,
		      t_real_domain(fd));
		/* Linked: listed in this process's ledger until it closes it. */
		CHECK(!i || t_ledger_await(1, 1) >= 1, "connection %d: not live in any ledger", i);
		t_exchange_nth(fd, i, N, 1);
		close(fd);
	}
	return t_exit_code();
}

int main(int argc, char **argv)
{
	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	t_serve_sequence(client, CONNS, N);
	/* Only the first connection was asked about: one CONNECT, one ACCEPT. */
	CHECK(t_agent_count("ask") == 2, "%d asks, not 2", t_agent_count("ask"));
	CHECK(t_agent_count("swap shm link") == 1, "%d swaps with a link",
	      t_agent_count("swap shm link"));
	CHECK(t_ledger_await(0, 2 * (CONNS - 1)) == 2 * (CONNS - 1), "%d linked ends in the ledgers",
	      t_ledger_ends(0));
	CHECK(t_agent_count("ledger ") == 2, "%d ledgers, not one per process",
	      t_agent_count("ledger "));
	CHECK(t_ledger_ends(1) == 0, "%d linked ends still listed after every close",
	      t_ledger_ends(1));
	/* The agent hears CLOSED only of the connection it answered. */
	CHECK(t_agent_await("closed", 2) == 2, "%d CLOSED", t_agent_count("closed"));
	return t_shim_finish();
}
