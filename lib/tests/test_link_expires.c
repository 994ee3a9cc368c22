/* SPDX-License-Identifier: MIT */
/* Description: a link carries new connections only for the LINK_TTL the agent gave it: a connection made within it goes over the link without asking the agent, one made after it goes to the agent again (which hands a new link, used by the next one); every connection is swapped with data intact both ways */
/* Channels: shm-link host-tcp-link */
#include "shimtest.h"

/* Long enough that a connection made right after another is within it, even on a loaded machine. */
#define LINK_TTL_MS	(2 * T_SLACK_MS)
#define N		(64u << 10)

/* The connections, in order, and how each must be set up. */
static const struct {
	int linked;		/* over the link (else the agent decides) */
	int after_ttl;		/* made once the link it would use has expired */
} conns[] = {
	{ 0, 0 },	/* the first: the agent hands the link */
	{ 1, 0 },
	{ 0, 1 },	/* the link has expired: the agent again, a new link */
	{ 1, 0 },
};
#define CONNS	((int)(sizeof(conns) / sizeof(conns[0])))

static int client(uint16_t port)
{
	int64_t linked_at = 0;

	for (int i = 0; i < CONNS; i++) {
		int fd, asks = t_agent_count("ask"), opened = t_ledger_ends(0);
		int64_t t0;

		if (conns[i].after_ttl)
			usleep((LINK_TTL_MS + T_SLACK_MS) * 1000);
		/* Too late for the link: a stall of the machine, not of the library. */
		if (conns[i].linked)
			CHECK(t_ms() - linked_at < LINK_TTL_MS,
			      "connection %d started %lld ms after the link came, its TTL is %d ms",
			      i, (long long)(t_ms() - linked_at), LINK_TTL_MS);
		t0 = t_ms();
		fd = t_connect(AF_INET, port);
		if (!conns[i].linked)
			linked_at = t0;	/* the link expires no sooner than its TTL after this */
		CHECK(t_swapped(fd), "connection %d not swapped", i);
		t_exchange_nth(fd, i, N, 1);
		close(fd);
		if (conns[i].linked) {
			CHECK(t_agent_count("ask") == asks,
			      "connection %d: %d asks, not %d: it did not go over the link", i,
			      t_agent_count("ask"), asks);
			CHECK(t_ledger_await(0, opened + 2) == opened + 2,
			      "connection %d: %d linked ends in the ledgers, not %d", i,
			      t_ledger_ends(0), opened + 2);
		} else {
			CHECK(t_agent_count("ask") == asks + 2,
			      "connection %d: %d asks, not %d: the agent did not decide it", i,
			      t_agent_count("ask"), asks + 2);
		}
	}
	return t_exit_code();
}

int main(int argc, char **argv)
{
	char ttl[16];

	(void)argc;
	/* Read by the fake agent, which t_shim_setup starts. */
	snprintf(ttl, sizeof(ttl), "%d", LINK_TTL_MS);
	setenv("FF_TEST_LINK_TTL", ttl, 1);
	t_shim_setup(argv, FA_BROKER);
	t_serve_sequence(client, CONNS, N);
	CHECK(t_agent_count(t_link_grant()) == 2, "%d swaps with a link, not 2",
	      t_agent_count(t_link_grant()));
	return t_shim_finish();
}
