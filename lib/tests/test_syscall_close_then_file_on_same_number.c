/* SPDX-License-Identifier: MIT */
/* Description: an accepted, swapped socket closed with syscall(SYS_close) (as libuv closes): a 1 MiB file that then gets its number reads back intact, the agent hears CLOSED and the peer reads EOF */
/* Channels: unix host-tcp shm shm-link */
#include "shimtest.h"

int main(int argc, char **argv)
{
	int cfd, sfd, before;

	(void)argc;
	t_setup_swapped_pair(argv, &cfd, &sfd);
	before = t_agent_count("closed");
	CHECK(syscall(SYS_close, sfd) == 0, "syscall(SYS_close): %s", strerror(errno));
	t_closed_then_file("syscall(SYS_close)", sfd, cfd, before);
	return t_shim_finish();
}
