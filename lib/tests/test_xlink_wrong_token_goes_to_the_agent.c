/* SPDX-License-Identifier: MIT */
/* Description: offers over a cross-host link whose token is not the link's are refused by the accepting library (their stock connection closed), so no connection is set up over them: every one goes through the agent, swapped, data intact both ways, nothing in a ledger */
/* Channels: host-tcp-link */
#include "shimtest.h"

#define CONNS	6
#define N	(64u << 10)

static int client(uint16_t port)
{
	for (int i = 0; i < CONNS; i++) {
		int fd = t_connect(AF_INET, port);

		CHECK(t_swapped(fd), "connection %d not swapped", i);
		t_exchange_nth(fd, i, N, 1);
		close(fd);
	}
	return t_exit_code();
}

int main(int argc, char **argv)
{
	(void)argc;
	/* The fake agent gives the connector a wrong token for every link. */
	setenv("FF_TEST_XLINK_TOKEN", "bad", 1);
	t_shim_setup(argv, FA_BROKER);
	t_serve_sequence(client, CONNS, N);
	CHECK(t_agent_count("ask") == 2 * CONNS, "%d asks, not %d: a connection went over a link",
	      t_agent_count("ask"), 2 * CONNS);
	/* Every connector tried its new link: a fill each, after the first grant. */
	CHECK(t_agent_count("fill 16") == CONNS - 1, "%d fills, not %d", t_agent_count("fill 16"),
	      CONNS - 1);
	CHECK(t_ledger_ends(0) == 0, "%d linked ends", t_ledger_ends(0));
	return t_shim_finish();
}
