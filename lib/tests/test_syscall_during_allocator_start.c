/* SPDX-License-Identifier: MIT */
/* Description: an allocator that calls syscall(SYS_read) while it holds its own lock, before the library has started (jemalloc reads /proc/sys/vm/overcommit_memory so, redis-server's start): the read goes to the kernel and nothing waits on that lock; the library starts later, on the first wrapped call */
#include <pthread.h>

#include "shimtest.h"

/* This program's calloc (it overrides libc's for the library too): libc's malloc under a lock. */
static pthread_mutex_t alloc_mu = PTHREAD_MUTEX_INITIALIZER;
static int trap;	/* set in the "start" role: the first calloc reads through syscall() */

extern void *__libc_malloc(size_t);

__attribute__((visibility("default"))) void *calloc(size_t n, size_t size)
{
	void *p;

	pthread_mutex_lock(&alloc_mu);
	if (trap) {
		char c;
		int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);

		trap = 0;
		/* The library must not start here: it allocates, and this lock is held. */
		if (fd < 0 || syscall(SYS_read, fd, &c, 1) != 1 || syscall(SYS_close, fd))
			_exit(T_EXIT_FAIL);
	}
	p = n && size > SIZE_MAX / n ? NULL : __libc_malloc(n * size);
	if (p)
		memset(p, 0, n * size);
	pthread_mutex_unlock(&alloc_mu);
	return p;
}

/* "<self> start": the allocator's first call, then the library's first. */
static int start(void)
{
	void *volatile p;	/* or the compiler drops the calloc/free pair */
	int cfd, sfd;
	char c;

	trap = 1;
	p = calloc(1, 16);
	free(p);
	t_pair(AF_INET, &cfd, &sfd);
	return write(cfd, "a", 1) == 1 && read(sfd, &c, 1) == 1 && c == 'a' ? 0 : 1;
}

int main(int argc, char **argv)
{
	int lines, with;

	if (argc == 2 && !strcmp(argv[1], "start"))
		return start();
	if (getenv("FF_TEST_PRELOAD_EXTRA") && *getenv("FF_TEST_PRELOAD_EXTRA")) {
		printf("a sanitizer's allocator cannot be replaced by the program's\n");
		return T_EXIT_SKIP;
	}
	t_shim_setup(argv, -1);
	CHECK(t_role("start", "0", NULL, "", &lines, &with) == 0,
	      "the allocator's read or the connection after it failed");
	return t_shim_finish();
}
