/* SPDX-License-Identifier: MIT */
/* Description: a libc without a function the library needs (made so by a preloaded dlsym that hides splice): the first wrapped call prints why and aborts at once, never waits on the library's own start-up (its message used to go through the library's write(), which waited for that very start-up) */
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "testutil.h"

#define HIDDEN		"splice"
#define BOUND_MS	5000

int main(int argc, char **argv)
{
	char pre[3 * PATH_MAX + 8], out[4096] = "";
	struct pollfd p;
	size_t got = 0;
	int pipefd[2], status = 0, hung = 0;
	pid_t pid;

	if (argc > 1 && !strcmp(argv[1], "child")) {
		close(-1);	/* the first wrapped call: the library starts up */
		return 0;
	}
	t_preload_hiding(pre, sizeof(pre));
	CHECK(pipe2(pipefd, O_CLOEXEC) == 0, "pipe");
	pid = fork();
	if (pid == 0) {
		dup2(pipefd[1], 2);
		setenv("LD_PRELOAD", pre, 1);
		setenv("FF_TEST_HIDE", HIDDEN, 1);
		execl("/proc/self/exe", argv[0], "child", (char *)NULL);
		_exit(127);
	}
	close(pipefd[1]);
	/* The child's stderr ends when it does; a child still there after the bound hangs. */
	p = (struct pollfd){ .fd = pipefd[0], .events = POLLIN };
	for (;;) {
		ssize_t r;

		if (poll(&p, 1, BOUND_MS) <= 0) {
			hung = 1;
			break;
		}
		r = read(pipefd[0], out + got, sizeof(out) - 1 - got);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	out[got] = '\0';
	if (hung)
		kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	CHECK(!hung, "the program hung for %d ms when libc lacked %s", BOUND_MS, HIDDEN);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
	      "the program did not abort (status 0x%x)", status);
	CHECK(strstr(out, "cannot find libc's " HIDDEN), "no message saying why; stderr: %s", out);
	return t_exit_code();
}
