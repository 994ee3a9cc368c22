/* SPDX-License-Identifier: MIT */
/* Description: fork leaves every fd of parent and child open, whether or not the process ever had a link (the library closes only its own links in the child: PostgreSQL's forked processes lost fd 0 once) */
/* Channels: unix shm-link */
#include "shimtest.h"

/* Whether fds 0..2 and fd are all open in this process. */
static int all_open(int fd)
{
	for (int i = 0; i < 3; i++)
		if (fcntl(i, F_GETFD) < 0)
			return 0;
	return fcntl(fd, F_GETFD) >= 0;
}

/* Fork; the child reports whether its fds are all open; the parent checks its own too. */
static void fork_and_check(int fd, const char *when)
{
	pid_t pid = fork();
	int status = 0;

	if (pid == 0)
		_exit(all_open(fd) ? 0 : 1);
	CHECK(pid > 0, "fork: %s", strerror(errno));
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: the child lost an fd", when);
	CHECK(all_open(fd), "%s: the parent lost an fd", when);
}

int main(int argc, char **argv)
{
	int cfd, sfd, p[2];

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	CHECK(pipe(p) == 0, "pipe");
	fork_and_check(p[0], "before any connection");
	/* Two connections: the first gives a link when the agent hands them. */
	for (int i = 0; i < 2; i++) {
		t_pair(AF_INET, &cfd, &sfd);
		fork_and_check(p[0], i ? "with a link" : "after one connection");
		CHECK(t_send_stream(cfd, 4096, 1) == 0 && t_recv_stream(sfd, 4096, 1) == 0,
		      "connection %d after fork: data lost", i);
		close(cfd);
		close(sfd);
	}
	return t_shim_finish();
}
