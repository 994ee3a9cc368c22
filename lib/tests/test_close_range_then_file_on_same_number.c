/* SPDX-License-Identifier: MIT */
/* Description: a swapped socket closed by close_range(), libc's or syscall(SYS_close_range): a 1 MiB file that then gets its number reads back intact, the agent hears CLOSED and the peer reads EOF */
/* Channels: unix host-tcp shm */
#include "shimtest.h"

int main(int argc, char **argv)
{
	int cfd, sfd, before;

	(void)argc;
	t_setup_swapped_pair(argv, &cfd, &sfd);
	before = t_agent_count("closed");
	CHECK(close_range((unsigned)sfd, (unsigned)sfd, 0) == 0, "close_range: %s", strerror(errno));
	t_closed_then_file("close_range", sfd, cfd, before);

	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(sfd), "second pair not swapped");
	before = t_agent_count("closed");
	CHECK(syscall(SYS_close_range, sfd, sfd, 0) == 0, "syscall(SYS_close_range): %s",
	      strerror(errno));
	t_closed_then_file("syscall(SYS_close_range)", sfd, cfd, before);
	return t_shim_finish();
}
