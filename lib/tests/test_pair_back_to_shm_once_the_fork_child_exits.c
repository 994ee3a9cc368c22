/* SPDX-License-Identifier: MIT */
/* Description: a connection between two processes, moved down to a socket pair when the acceptor forked (its child holding the pair for a while), comes back onto shared memory once the child has exited: the agent offers a new channel, both ends hold the connection while no byte is in flight and move onto it, the pair becoming its bell; every byte written before the fork, while the pair was shared and after the move arrives once and in order both ways, both ends' ledger entries say shm again, and a close is EOF at the other end */
/* Channels: shm */
#include "shimtest.h"

#include <sys/wait.h>

#define N	(256u << 10)

static int server(int ctl)
{
	int lfd, fd = t_serve_one(ctl, &lfd), st = -1;
	pid_t kid;
	char c;

	CHECK(t_recv_stream(fd, N, 1) == 0, "the connector's bytes before the fork");
	kid = fork();
	if (kid == 0) {
		usleep(300000);
		_exit(0);
	}
	CHECK(kid > 0, "fork: %s", strerror(errno));
	CHECK(t_ledger_entries(FF_PATH_UNIX, "moved-down") >= 1, "the acceptor's end is not a socket pair after its fork");
	CHECK(t_send_stream(fd, N, 2) == 0, "the acceptor's bytes while its child holds the pair");
	CHECK(waitpid(kid, &st, 0) == kid && WIFEXITED(st), "the child");
	CHECK(t_ledger_entries_await(FF_PATH_SHM, "", 2) == 2, "5 s after the child exited %d ends are listed shm, want 2",
	      t_ledger_entries(FF_PATH_SHM, ""));
	CHECK(t_recv_stream(fd, N, 3) == 0, "the connector's bytes after the move");
	CHECK(t_send_stream(fd, N, 4) == 0, "the acceptor's bytes after the move");
	CHECK(read(fd, &c, 1) == 0, "the connector's close is not EOF here");
	close(fd);
	close(lfd);
	return t_exit_code();
}

int main(int argc, char **argv)
{
	int ctl, fd;
	pid_t pid;

	(void)argc;
	setenv("FF_TEST_RESUME_MS", "200", 1);
	t_shim_setup(argv, FA_BROKER);
	fd = t_connect_forked(server, &ctl, &pid);
	CHECK(t_send_stream(fd, N, 1) == 0, "the connector's bytes before the fork");
	CHECK(t_recv_stream(fd, N, 2) == 0, "the acceptor's bytes while its child holds the pair");
	CHECK(t_ledger_entries_await(FF_PATH_SHM, "", 2) == 2, "5 s after the child exited %d ends are listed shm, want 2",
	      t_ledger_entries(FF_PATH_SHM, ""));
	CHECK(t_send_stream(fd, N, 3) == 0, "the connector's bytes after the move");
	CHECK(t_recv_stream(fd, N, 4) == 0, "the acceptor's bytes after the move");
	close(fd);
	t_wait_child(pid, "the acceptor");
	CHECK(t_agent_count("resume") >= 2 && t_agent_count("watch parked") >= 2,
	      "the agent sent %d RESUMEs and heard %d ends moved, want 2 and 2 at least",
	      t_agent_count("resume"), t_agent_count("watch parked"));
	return t_exit_code();
}
