/* SPDX-License-Identifier: MIT */
/* Description: a non-blocking connect still pending when its process forks is decided by whichever process looks first, as before the library's settler thread existed: the parent holding its copy without looking does not decide it behind the back of the child that uses it (which then read a connection reset) */
/* Channels: unix shm */
#include <sys/wait.h>

#include "pending_connect.h"

/* One connection; exit status = failures. */
static int serve_one(int lfd)
{
	return pc_serve(accept(lfd, NULL, NULL));
}

static void cases(uint16_t port)
{
	int fd = pc_start_connect(port);
	pid_t child = fork();

	CHECK(child >= 0, "fork: %s", strerror(errno));
	if (child == 0) {
		usleep(30000);	/* past the settler's 3 ms: only the program decides */
		pc_expect(fd, "hello", "the child");
		CHECK(write(fd, "ping", 4) == 4, "the child's write: %s", strerror(errno));
		pc_expect(fd, "ping", "the child");
		_exit(t_failures ? 1 : 0);
	}
	usleep(60000);	/* the parent holds its copy, never looking */
	close(fd);
	t_wait_child(child, "the child using the connection");
}

int main(int argc, char **argv)
{
	(void)argc;
	return t_run_served(argv, serve_one, cases, 1);
}
