/* SPDX-License-Identifier: MIT */
/* Description: a connection moved down to a socket pair (the acceptor forked) whose connector shut down its reading side is never moved back onto shared memory (only that end can see its own SHUT_RD; the peer, deciding, would have moved a connection the connector then ended): every try is refused, and the connector's writes after its shutdown all reach the acceptor */
/* Channels: shm */
#include "shimtest.h"

#include <sys/wait.h>

#define N	(64u << 10)

static int server(int ctl)
{
	int lfd, fd = t_serve_one(ctl, &lfd);
	char go;

	t_fork_child_exits();
	CHECK(write(fd, "x", 1) == 1, "the byte after the fork");
	CHECK(read(ctl, &go, 1) == 1, "the connector's go");
	CHECK(t_recv_stream(fd, N, 5) == 0, "the connector's bytes after its SHUT_RD");
	close(fd);
	close(lfd);
	return t_exit_code();
}

int main(int argc, char **argv)
{
	int ctl, fd;
	pid_t pid;
	char x;

	(void)argc;
	setenv("FF_TEST_RESUME_MS", "100", 1);
	t_shim_setup(argv, FA_BROKER);
	fd = t_connect_forked(server, &ctl, &pid);
	CHECK(read(fd, &x, 1) == 1 && x == 'x', "the byte after the fork");
	CHECK(shutdown(fd, SHUT_RD) == 0, "SHUT_RD: %s", strerror(errno));
	/* The acceptor's fork fences moves for 2 s; then a try each 100 ms. */
	usleep(3000000);
	CHECK(t_agent_count("watch parked") == 0 && t_agent_count("watch not-parked") >= 4,
	      "ends said %d times moved, %d times not", t_agent_count("watch parked"), t_agent_count("watch not-parked"));
	CHECK(write(ctl, "g", 1) == 1, "go");
	signal(SIGPIPE, SIG_IGN);
	CHECK(t_send_stream(fd, N, 5) == 0, "the connector's writes after its own SHUT_RD: %s", strerror(errno));
	close(fd);
	t_wait_child(pid, "the acceptor");
	return t_exit_code();
}
