/* SPDX-License-Identifier: MIT */
/* Description: a connection the agent answered is listed in its process's ledger (its path, the agent's reason for an overlay answer) from the answer until its last close, so that a restarted agent finds it; CLOSED is still sent */
/* Channels: unix host-tcp shm */
#include "shimtest.h"

/* The path the fake agent hands in this run. */
static int channel_path(void)
{
	return fa_host_tcp() ? FF_PATH_HOST_TCP : fa_shm() ? FF_PATH_SHM : FF_PATH_UNIX;
}

int main(int argc, char **argv)
{
	int cfd, sfd, fd2;

	(void)argc;
	t_setup_swapped_pair(argv, &cfd, &sfd);
	CHECK(t_ledger_entries(channel_path(), "") == 2, "%d live entries on path %d, want both ends",
	      t_ledger_entries(channel_path(), ""), channel_path());
	CHECK(t_ledger_ends(0) == 0, "%d linked connections counted: the agent counts its own",
	      t_ledger_ends(0));
	fd2 = dup(cfd);
	close(cfd);
	CHECK(t_ledger_ends(1) == 2, "%d live entries while a copy of the fd is open", t_ledger_ends(1));
	close(fd2);
	close(sfd);
	CHECK(t_ledger_ends(1) == 0, "%d live entries after the last closes", t_ledger_ends(1));
	CHECK(t_agent_await("closed", 2) == 2, "%d CLOSED, want 2", t_agent_count("closed"));

	t_unannounced_pair(&cfd, &sfd);
	CHECK(!t_swapped(cfd), "swapped although the agent said overlay");
	CHECK(t_ledger_entries(FF_PATH_OVERLAY, "listener-not-freeflow") == 1,
	      "%d live overlay entries with the agent's reason, want the connecting end's",
	      t_ledger_entries(FF_PATH_OVERLAY, "listener-not-freeflow"));
	close(cfd);
	close(sfd);
	CHECK(t_ledger_ends(1) == 0, "%d live entries after the overlay pair closed", t_ledger_ends(1));
	return t_shim_finish();
}
