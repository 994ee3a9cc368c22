/* SPDX-License-Identifier: MIT */
/* Description: a libc without close_range, closefrom or epoll_pwait2 (made so by a preloaded dlsym that hides one) on a kernel with them: syscall(SYS_close_range), closefrom and syscall(SYS_epoll_pwait2) do what they do without the library (the system call), never ENOSYS or a close of the tracked fds only */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "testutil.h"

/* A number no start-up uses: closed by the call under test, or not. */
#define FD		50

/* In the child, libc lacking hidden: 0 when the call did what the kernel does. */
static int child(const char *hidden)
{
	struct epoll_event ev;
	long r;

	if (!strcmp(hidden, "epoll_pwait2")) {
		int ep = epoll_create1(0);

		r = syscall(SYS_epoll_pwait2, ep, &ev, 1, &(struct timespec){ 0 }, NULL, 8);
		CHECK(r == 0, "syscall(SYS_epoll_pwait2) on an empty set: %ld (%s)", r, strerror(errno));
		return t_exit_code();
	}
	CHECK(dup2(0, FD) == FD, "dup2: %s", strerror(errno));
	if (!strcmp(hidden, "close_range")) {
		r = syscall(SYS_close_range, FD, FD, 0);
		CHECK(r == 0, "syscall(SYS_close_range): %ld (%s)", r, strerror(errno));
	} else {
		closefrom(FD);
	}
	CHECK(fcntl(FD, F_GETFD) < 0 && errno == EBADF, "fd %d still open after %s", FD, hidden);
	return t_exit_code();
}

/* Runs this program again with libc's hidden function hidden from the library. */
static void run_without(char **argv, const char *pre, const char *hidden)
{
	int status = 0;
	pid_t pid = fork();

	if (pid == 0) {
		setenv("LD_PRELOAD", pre, 1);
		setenv("FF_TEST_HIDE", hidden, 1);
		execl("/proc/self/exe", argv[0], "child", hidden, (char *)NULL);
		_exit(127);
	}
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork/waitpid: %s", strerror(errno));
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "without libc's %s: status 0x%x",
	      hidden, status);
}

int main(int argc, char **argv)
{
	char pre[3 * PATH_MAX + 8];

	if (argc > 2 && !strcmp(argv[1], "child"))
		return child(argv[2]);
	t_preload_hiding(pre, sizeof(pre));
	run_without(argv, pre, "close_range");
	run_without(argv, pre, "closefrom");
	run_without(argv, pre, "epoll_pwait2");
	return t_exit_code();
}
