/* SPDX-License-Identifier: MIT */
/* Description: an acceptor that calls accept() only after its connector gave up waiting for its link offer and asked the agent finds the offer withdrawn and asks too, so both meet at the agent (a swap, nothing in a ledger); one that comes after even the agent's peer wait gets the agent's late answer, and both ends still agree on one path; data intact both ways and no call hangs */
/* Channels: shm-link host-tcp-link */
#include <poll.h>

#include "shimtest.h"

#define N		(64u << 10)
#define OFFER_WAIT_MS	5	/* how long a connector waits for its offer to be taken */

enum conn { GIVES_LINK, AFTER_OFFER_WAIT, AFTER_PEER_WAIT, CONNS };

/*
 * Each end tells the other over ctl whether its connection is swapped;
 * 1 if both are on the same path. Only then can bytes flow, so the ends
 * exchange data only then (else each would wait for the other forever).
 */
static int agree(int ctl, int fd)
{
	char mine = (char)('0' + t_swapped(fd)), theirs = 0;

	if (write(ctl, &mine, 1) != 1 || read(ctl, &theirs, 1) != 1)
		return 0;
	return mine == theirs;
}

static int client(int ctl, uint16_t port)
{
	for (int i = 0; i < CONNS; i++) {
		int64_t t0 = t_ms();
		int fd = t_connect(AF_INET, port);
		int64_t took = t_ms() - t0;

		if (i == AFTER_PEER_WAIT)
			CHECK(took < OFFER_WAIT_MS + FA_WAIT_MS + T_SLACK_MS,
			      "connect took %lld ms: more than its offer wait and the agent's peer wait",
			      (long long)took);
		if (agree(ctl, fd)) {
			t_exchange_nth(fd, i, N, 1);
		}
		close(fd);
	}
	return t_exit_code();
}

/* Wait until the agent has logged want lines starting with word (at most 2 s). */
static void await_agent(const char *word, int want)
{
	CHECK(t_agent_await(word, want) >= want, "the agent never logged %d \"%s\" (%d)", want,
	      word, t_agent_count(word));
}

int main(int argc, char **argv)
{
	int ctl, lfd, fd;
	uint16_t port;
	pid_t pid;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen(AF_INET, &port);
	pid = t_fork_ctl(&ctl);
	if (pid == 0)
		_exit(client(ctl, port));
	for (int i = 0; i < CONNS; i++) {
		struct pollfd p = { .fd = lfd, .events = POLLIN };
		int swapped, same;
		int64_t t0;

		CHECK(poll(&p, 1, 5000) == 1, "connection %d never arrived", i);
		/*
		 * Late by construction, whatever the scheduling: accept() only once
		 * the connector has asked the agent (so its offer wait is over), and
		 * for the last one once the agent has given up waiting for us.
		 */
		if (i == AFTER_OFFER_WAIT)
			await_agent("ask", 3);
		if (i == AFTER_PEER_WAIT)
			await_agent("overlay peer-timeout", 1);
		t0 = t_ms();
		fd = accept(lfd, NULL, NULL);
		CHECK(fd >= 0, "accept %d: %s", i, strerror(errno));
		if (i == AFTER_PEER_WAIT)
			CHECK(t_ms() - t0 < T_SLACK_MS,
			      "accept took %lld ms: the agent's late answer must come at once",
			      (long long)(t_ms() - t0));
		swapped = t_swapped(fd);
		same = agree(ctl, fd);
		CHECK(same, "connection %d: the two ends are on different paths", i);
		/* The agent decided each: a swap, and for the last its peer-timeout overlay. */
		CHECK(swapped == (i != AFTER_PEER_WAIT), "connection %d %s", i,
		      swapped ? "swapped, not on the overlay the agent decided" : "not swapped");
		if (same) {
			t_exchange_nth(fd, i, N, 0);
		}
		close(fd);
	}
	t_wait_child(pid, "client");
	close(lfd);
	/* Every connection was decided by the agent: both ends asked, none is in a ledger. */
	CHECK(t_agent_count("ask") == 2 * CONNS, "%d asks, not %d", t_agent_count("ask"),
	      2 * CONNS);
	CHECK(t_agent_count(t_link_grant()) == 2, "%d swaps, not 2",
	      t_agent_count(t_link_grant()));
	CHECK(t_agent_count("overlay") == 1, "%d overlay decisions, not 1",
	      t_agent_count("overlay"));
	CHECK(t_agent_await("closed", 2 * CONNS) == 2 * CONNS, "%d CLOSED",
	      t_agent_count("closed"));
	CHECK(t_ledger_ends(0) == 0, "%d linked ends: a withdrawn offer was taken",
	      t_ledger_ends(0));
	return t_shim_finish();
}
