/* SPDX-License-Identifier: MIT */
/* Description: a swapped socket closed by closefrom() (the highest fds of the process): a 1 MiB file that then gets its number reads back intact, the agent hears CLOSED and the peer reads EOF */
/* Channels: unix host-tcp shm */
#include "shimtest.h"

int main(int argc, char **argv)
{
	int cfd, sfd, before, hi;

	(void)argc;
	t_setup_swapped_pair(argv, &cfd, &sfd);
	/* closefrom(n) closes every fd from n up: put the connection at the top. */
	hi = dup2(sfd, 100);
	CHECK(hi == 100 && close(sfd) == 0, "dup2 to 100: %s", strerror(errno));
	before = t_agent_count("closed");
	closefrom(hi);
	t_closed_then_file("closefrom", hi, cfd, before);
	return t_shim_finish();
}
