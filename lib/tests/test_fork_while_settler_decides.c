/* SPDX-License-Identifier: MIT */
/* Description: a fork while the library's settler is deciding a connect the program has not looked at (its CONNECT waits at the agent for a slow acceptor) waits for that decision: the child, which uses the connection, gets it on its channel, bytes intact; it no longer finds its copy left on an overlay socket its peer has left (it read EOF) */
/* Channels: unix shm */
#include <sys/wait.h>

#include "pending_connect.h"

#define ACCEPT_LATE_US	30000	/* well past the settler's 3 to 8 ms, inside the agent's wait */

/* Accepts late, then serves; exit status = failures. */
static int serve_late(int lfd)
{
	usleep(ACCEPT_LATE_US);
	return pc_serve(accept(lfd, NULL, NULL));
}

static void cases(uint16_t port)
{
	int fd = pc_start_connect(port);
	pid_t child;

	/* The settler's CONNECT is at the agent, waiting for the acceptor. */
	CHECK(t_agent_await("ask", 1) >= 1, "the settler did not ask the agent");
	child = fork();
	CHECK(child >= 0, "fork: %s", strerror(errno));
	if (child == 0) {
		pc_expect(fd, "hello", "the child");
		CHECK(write(fd, "ping", 4) == 4, "the child's write: %s", strerror(errno));
		pc_expect(fd, "ping", "the child");
		_exit(t_failures ? 1 : 0);
	}
	close(fd);
	t_wait_child(child, "the child using the connection");
}

int main(int argc, char **argv)
{
	(void)argc;
	return t_run_served(argv, serve_late, cases, 1);
}
