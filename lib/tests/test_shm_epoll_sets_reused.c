/* SPDX-License-Identifier: MIT */
/* Description: an epoll fd created, copied (F_DUPFD_CLOEXEC, as mio does), given an shm registration through the copy and closed with its copy, 100000 times, leaves the library's memory bounded: the set no number leads to any more is reused, not lost; the last cycle's set still reports */
/* Channels: shm */
#include <malloc.h>

#include "readiness_test.h"

#define CYCLES		100000
#define WARMUP		1000
/* A lost set is over 100 bytes: 99000 of them are ten times this. */
#define MAX_GROWTH	(1 << 20)

/* Bytes in use by malloc, in every arena: the library allocates with it too. */
static size_t in_use(void)
{
	struct mallinfo2 mi = mallinfo2();

	return mi.uordblks + mi.hblkhd;
}

/* One cycle; check: the registration made through the copy is reported on the original. */
static void cycle(int a, int b, int check)
{
	int ep = epoll_create1(EPOLL_CLOEXEC), copy = fcntl(ep, F_DUPFD_CLOEXEC, 0);

	CHECK(ep >= 0 && copy >= 0, "epoll_create1/F_DUPFD_CLOEXEC: %s", strerror(errno));
	CHECK(rt_ctl(copy, EPOLL_CTL_ADD, b, EPOLLIN, 7) == 0, "add through the copy: %s",
	      strerror(errno));
	if (check) {
		CHECK(write(a, "x", 1) == 1, "write");
		rt_expect(ep, RT_SURE_MS, 7, EPOLLIN, 0, "registered through the copy");
		CHECK(rt_drain(b) == 1, "the byte");
	}
	close(copy);
	close(ep);
}

int main(int argc, char **argv)
{
	size_t before, after;
	int a, b;

	(void)argc;
	t_setup_swapped_pair(argv, &a, &b);
	for (int i = 0; i < WARMUP; i++)
		cycle(a, b, i == 0);
	before = in_use();
	for (int i = 0; i < CYCLES - WARMUP; i++)
		cycle(a, b, 0);
	after = in_use();
	CHECK(after < before + MAX_GROWTH, "%d epoll create/copy/close cycles grew malloc'ed memory "
	      "by %zu bytes (at most %d)", CYCLES - WARMUP, after - before, MAX_GROWTH);
	cycle(a, b, 1);
	close(a);
	close(b);
	CHECK(t_fast_await(1) == 1, "%d fast connections", t_fast_conns());
	return t_shim_finish();
}
