/* SPDX-License-Identifier: MIT */
/* Description: built with FF_CHECK_INIT (make test-asan builds the library so; this test's own copy of the fd table always), the fd table's accessor called before start-up made the table aborts and says why, so a path that reaches it without entering through REAL(), ff_slot_enter() or ff_init() is found instead of reading every fd as untracked; once the table is made, it answers */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

/* fdtable.c, built with -DFF_CHECK_INIT for this test (lib/Makefile). */
struct ff_slot;
struct ff_slot *ff_fd_slot(int fd);
void ff_table_init(void);

int main(void)
{
	char out[1024] = "";
	size_t got = 0;
	int pipefd[2], status = 0;
	ssize_t r;
	pid_t pid;

	CHECK(pipe2(pipefd, O_CLOEXEC) == 0, "pipe");
	pid = fork();
	if (pid == 0) {
		dup2(pipefd[1], 2);
		ff_fd_slot(0);	/* nothing started the library */
		_exit(0);
	}
	close(pipefd[1]);
	while (got < sizeof(out) - 1 && (r = read(pipefd[0], out + got, sizeof(out) - 1 - got)) > 0)
		got += (size_t)r;
	out[got] = '\0';
	waitpid(pid, &status, 0);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
	      "ff_fd_slot before start-up did not abort (status 0x%x)", status);
	CHECK(strstr(out, "ff_fd_slot(0) before start-up"), "no message saying why; stderr: %s", out);

	ff_table_init();
	CHECK(ff_fd_slot(0) != NULL, "ff_fd_slot(0) after ff_table_init: no slot");
	return t_exit_code();
}
