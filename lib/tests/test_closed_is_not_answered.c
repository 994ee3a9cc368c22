/* SPDX-License-Identifier: MIT */
/* Description: close sends CLOSED without waiting (the agent never answers it), and the next request on the same session (LISTEN, ACCEPT) reads its own reply: every connection made after earlier closes is still swapped, and no session is dropped and reopened */
/* Channels: unix host-tcp */
#include "shimtest.h"

#define ROUNDS	10

int main(int argc, char **argv)
{
	int64_t t0, slowest = 0;
	int cfd, sfd;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	for (int i = 0; i < ROUNDS; i++) {
		/* This thread listens and accepts on its one session; a new thread connects. */
		t_pair(AF_INET, &cfd, &sfd);
		CHECK(t_swapped(cfd) && t_swapped(sfd), "round %d: not swapped after %d closes", i,
		      2 * i);
		t0 = t_ms();
		close(cfd);
		close(sfd);
		if (t_ms() - t0 > slowest)
			slowest = t_ms() - t0;
	}
	CHECK(slowest < T_NO_WAIT_MS, "two closes took %lld ms: close waited for an answer",
	      (long long)slowest);
	/* One HELLO for this thread's session, one per connecting thread: none was redone. */
	CHECK(t_agent_count("hello") == 1 + ROUNDS, "%d HELLO for %d rounds: a session broke",
	      t_agent_count("hello"), ROUNDS);
	CHECK(t_agent_await("closed", 2 * ROUNDS) == 2 * ROUNDS, "%d CLOSED, want %d",
	      t_agent_count("closed"), 2 * ROUNDS);
	return t_shim_finish();
}
