/* SPDX-License-Identifier: MIT */
/* Description: a forked child that uses an inherited listener registers it in its own name on its first agent session (the agent keys listeners by process, so a daemon whose parent exits after fork keeps its fast path), while a child that only closes its copy sends no UNLISTEN */
#include "shimtest.h"

/* Lines "listen <pid>" in the agent log. */
static int listens_by(pid_t pid)
{
	char line[64];

	snprintf(line, sizeof(line), "listen %d\n", (int)pid);
	return t_agent_count(line);
}

int main(int argc, char **argv)
{
	uint16_t port;
	int lfd, fd;
	pid_t pid;
	char c;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen(AF_INET, &port);
	pid = fork();
	if (pid == 0) {
		close(lfd);	/* not its registration: no UNLISTEN */
		_exit(0);
	}
	t_wait_child(pid, "closing child");
	CHECK(t_agent_count("unlisten") == 0, "a child's close withdrew its parent's listener");
	pid = fork();
	if (pid == 0) {
		fd = accept(lfd, NULL, NULL);
		CHECK(fd >= 0 && t_swapped(fd), "the child's accepted connection was not swapped");
		CHECK(read(fd, &c, 1) == 1, "read");
		close(fd);
		CHECK(listens_by(getpid()) == 1, "the child did not register the listener itself");
		_exit(t_exit_code());
	}
	fd = t_connect(AF_INET, port);
	CHECK(t_swapped(fd), "the connection to the child not swapped");
	CHECK(write(fd, "z", 1) == 1, "write");
	t_wait_child(pid, "accepting child");
	close(fd);
	close(lfd);
	CHECK(listens_by(getpid()) == 1, "the parent registered %d times", listens_by(getpid()));
	CHECK(t_agent_count("unlisten") == 1, "%d UNLISTEN", t_agent_count("unlisten"));
	return t_shim_finish();
}
