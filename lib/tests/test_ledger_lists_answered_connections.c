/* SPDX-License-Identifier: MIT */
/* Description: a connection the agent answered is listed in its process's ledger (its path, the agent's reason for an overlay answer) from the answer until its last close, so that a restarted agent finds it; CLOSED is still sent; one the agent could not answer (it was away) is listed too, as overlay agent-unreachable */
/* Channels: unix host-tcp shm */
#include <dirent.h>

#include "shimtest.h"

/* Live entries of this process's own ledger on path with reason: the agent that held it is gone. */
static int own_entries(int path, const char *reason)
{
	struct t_ledger_want w = { path, reason };
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	char p[300], l[128];
	int n = 0;

	while (d && (de = readdir(d))) {
		ssize_t k;

		snprintf(p, sizeof(p), "/proc/self/fd/%s", de->d_name);
		k = readlink(p, l, sizeof(l) - 1);
		if (k > 0 && (l[k] = 0, strstr(l, "memfd:freeflow-ledger")))
			n += (int)t_ledger_live(atoi(de->d_name), &w);
	}
	if (d)
		closedir(d);
	return n;
}

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

	t_stop_agent();
	t_pair(AF_INET, &cfd, &sfd);
	CHECK(!t_swapped(cfd) && !t_swapped(sfd), "swapped without an agent");
	CHECK(own_entries(FF_PATH_OVERLAY, "agent-unreachable") == 1,
	      "%d live overlay entries agent-unreachable with the agent away, want the connecting end's",
	      own_entries(FF_PATH_OVERLAY, "agent-unreachable"));
	close(cfd);
	close(sfd);
	CHECK(own_entries(-1, NULL) == 0, "%d live entries after the unanswered pair closed", own_entries(-1, NULL));
	return t_shim_finish();
}
