/* SPDX-License-Identifier: MIT */
/* Description: after an agent restart (empty listener table) the accepting process re-registers its listener on the first connection, which both ends still decide alike, so the following connection is swapped again */
/* Channels: unix host-tcp shm shm-link */
#include "shimtest.h"

#define CONNS	3

/* Connects CONNS times, each when told; checks that both ends agree on the path. */
static int client(uint16_t port, int go, int lfd)
{
	close(lfd);	/* only the server holds the listener: it alone can re-register it */
	for (int i = 0; i < CONNS; i++) {
		char c, st;
		int fd;

		if (read(go, &c, 1) != 1)
			return 1;
		fd = t_connect(AF_INET, port);
		CHECK(write(fd, "x", 1) == 1 && read(fd, &st, 1) == 1, "conn %d: data", i);
		CHECK(t_swapped(fd) == (st == 'S'), "conn %d: the ends disagree (server %c)", i, st);
		close(fd);
	}
	return t_exit_code();
}

int main(int argc, char **argv)
{
	int go[2], swapped[CONNS], lfd;
	uint16_t port;
	pid_t pid;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen(AF_INET, &port);
	if (pipe(go))
		return T_EXIT_FAIL;
	pid = fork();
	if (pid == 0)
		_exit(client(port, go[0], lfd));
	for (int i = 0; i < CONNS; i++) {
		int fd;
		char c;

		if (i == 1)
			t_restart_agent(FA_BROKER);
		CHECK(write(go[1], "g", 1) == 1, "go");
		fd = accept(lfd, NULL, NULL);
		CHECK(fd >= 0 && read(fd, &c, 1) == 1 && c == 'x', "conn %d: accept/read", i);
		swapped[i] = t_swapped(fd);
		CHECK(write(fd, swapped[i] ? "S" : "O", 1) == 1, "conn %d: write", i);
		close(fd);
	}
	t_wait_child(pid, "client");
	CHECK(swapped[0], "the first connection (before the restart) was not swapped");
	CHECK(swapped[2], "the connection after the one that noticed the restart was not swapped");
	CHECK(t_agent_count("listen") == 2, "%d LISTEN, want 2 (one per agent)",
	      t_agent_count("listen"));
	close(lfd);
	return t_shim_finish();
}
