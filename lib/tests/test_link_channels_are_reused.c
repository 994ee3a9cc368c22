/* SPDX-License-Identifier: MIT */
/* Description: connections set up one after another over a link reuse the channels the link keeps once both ends let go of them (no new memfd per connection), each starting as new: data intact both ways over more than a ring's worth, in order; a connection still open at either end keeps its channel, so two open at once never share one */
/* Channels: shm-link */
#include "shimtest.h"

#define SEQ	12		/* connections one after another */
#define N	(300u << 10)	/* more than a ring (256 KiB): every index wraps */
#define KEPT	8		/* channels a link keeps (link.c) */

/* Distinct link-made channels (memfds "freeflow-shm") this process ever had mapped. */
static unsigned long inodes[64];
static int ninodes;

static int connect_swapped(uint16_t port, int i)
{
	int fd = t_connect(AF_INET, port);

	CHECK(t_swapped(fd), "connection %d not swapped", i);
	t_note_link_channels(inodes, &ninodes, 64);
	return fd;
}

static int client(uint16_t port)
{
	int a, b, i;

	/* The first through the agent, the rest over the link one by one. */
	for (i = 0; i < SEQ; i++) {
		int fd = connect_swapped(port, i);

		t_exchange_nth(fd, i, N, 1);
		close(fd);
	}
	/*
	 * The server lets go of each just after the client: a channel may be
	 * made anew while the last one is not free yet, never one per
	 * connection.
	 */
	CHECK(ninodes <= 3, "%d channels made for %d connections over one link", ninodes, SEQ - 1);
	/* Two open at once: each on its own channel, both intact. */
	a = connect_swapped(port, i);
	b = connect_swapped(port, i + 1);
	t_exchange_nth(b, i + 1, N, 1);
	t_exchange_nth(a, i, N, 1);
	close(a);
	close(b);
	CHECK(ninodes <= KEPT, "%d channels mapped, more than a link keeps", ninodes);
	return t_exit_code();
}

int main(int argc, char **argv)
{
	int lfd, fds[SEQ + 2];
	pid_t pid;

	(void)argc;
	setenv("FF_TEST_SHM_RING", "262144", 0);	/* read by the fake agent: the cases fill its rings */
	t_shim_setup(argv, FA_BROKER);
	lfd = t_fork_client(client, &pid);
	for (int i = 0; i < SEQ + 2; i++) {
		fds[i] = accept(lfd, NULL, NULL);
		CHECK(fds[i] >= 0 && t_swapped(fds[i]), "connection %d not accepted swapped", i);
		/* Both at once: the second is served while the first is still open. */
		if (i == SEQ)
			continue;
		t_exchange_nth(fds[i], i, N, 0);
		if (i == SEQ + 1)
			t_exchange_nth(fds[SEQ], SEQ, N, 0);
		close(fds[i]);
		if (i == SEQ + 1)
			close(fds[SEQ]);
	}
	t_wait_child(pid, "client");
	close(lfd);
	CHECK(t_agent_count("ask") == 2, "%d asks: not every later connection went over the link",
	      t_agent_count("ask"));
	CHECK(t_ledger_ends(0) == 2 * (SEQ + 1), "%d linked ends, not %d", t_ledger_ends(0),
	      2 * (SEQ + 1));
	return t_shim_finish();
}
