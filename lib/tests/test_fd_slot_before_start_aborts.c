/* SPDX-License-Identifier: MIT */
/* Description: built with FF_CHECK_INIT (make test-asan builds the library so; this test's own copy of the fd table always), the fd table's accessors (a slot, the high-water mark a scan of the table stops at) called before start-up made the table abort and say why, so a path that reaches it without entering through REAL(), ff_slot_enter() or ff_init() is found instead of reading every fd as untracked; once the table is made, it answers */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

/* fdtable.c, built with -DFF_CHECK_INIT for this test (lib/Makefile). */
struct ff_slot;
struct ff_slot *ff_fd_slot(int fd);
int ff_table_hiwater(void);
void ff_table_init(void);

/* Run fn in a child before start-up: it must abort, saying want on stderr. */
static void aborts(void (*fn)(void), const char *want)
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
		fn();	/* nothing started the library */
		_exit(0);
	}
	close(pipefd[1]);
	while (got < sizeof(out) - 1 && (r = read(pipefd[0], out + got, sizeof(out) - 1 - got)) > 0)
		got += (size_t)r;
	out[got] = '\0';
	close(pipefd[0]);
	waitpid(pid, &status, 0);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
	      "%s: expected, but it did not abort (status 0x%x)", want, status);
	CHECK(strstr(out, want), "no message saying why (%s); stderr: %s", want, out);
}

static void slot0(void)
{
	ff_fd_slot(0);
}

/* A scan of the table up to its high-water mark (close_range's) found nothing before start-up. */
static void hiwater(void)
{
	ff_table_hiwater();
}

int main(void)
{
	aborts(slot0, "ff_fd_slot(0) before start-up");
	aborts(hiwater, "ff_table_hiwater(-1) before start-up");
	ff_table_init();
	CHECK(ff_fd_slot(0) != NULL, "ff_fd_slot(0) after ff_table_init: no slot");
	return t_exit_code();
}
