/* SPDX-License-Identifier: MIT */
/* Description: an epoll set of 16 idle shm connections, as an event loop with 16 in flight has, woken by a byte on one of them: the wake-up reads no other connection's bell socket (it read all 16 once per wake-up, a system call each, most of a libuv echo's time in the library), and every byte is still reported */
/* Channels: shm */
#include "readiness_test.h"

#define CONNS	16
#define ROUNDS	(2 * CONNS)

int main(int argc, char **argv)
{
	int a[CONNS], b[CONNS], ep;
	unsigned before[CONNS];
	_Atomic unsigned *recvs;

	(void)argc;
	recvs = t_setup_counting_recvs(argv);
	if (!recvs)
		return t_shim_finish();
	ep = epoll_create1(EPOLL_CLOEXEC);
	for (int i = 0; i < CONNS; i++) {
		t_pair(AF_INET, &a[i], &b[i]);
		CHECK(t_swapped(b[i]) && b[i] < 1024, "connection %d: not on shm", i);
		/* Level-triggered EPOLLIN, as libuv registers a reading stream. */
		CHECK(rt_ctl(ep, EPOLL_CTL_ADD, b[i], EPOLLIN, (uint64_t)i) == 0, "add %d", i);
	}
	/* Whatever the adds left (the kick of the first) is taken now, not counted below. */
	rt_expect_none(ep, 0, "nothing written yet");
	for (int r = 0; r < ROUNDS; r++) {
		int k = (r * 7) % CONNS;
		struct rt_later l;
		char c;

		for (int i = 0; i < CONNS; i++)
			before[i] = recvs[b[i]];
		rt_write_later(&l, a[k]);
		rt_expect(ep, RT_SURE_MS, (uint64_t)k, EPOLLIN, 0, "the written connection");
		pthread_join(l.th, NULL);
		CHECK(read(b[k], &c, 1) == 1 && c == 'L', "round %d: the byte on connection %d", r, k);
		for (int i = 0; i < CONNS; i++)
			CHECK(i == k || recvs[b[i]] == before[i],
			      "round %d: the wake-up for connection %d read the bell of idle connection "
			      "%d %u times", r, k, i, recvs[b[i]] - before[i]);
		rt_expect_none(ep, 0, "all read");
	}
	for (int i = 0; i < CONNS; i++) {
		close(a[i]);
		close(b[i]);
	}
	close(ep);
	CHECK(t_fast_await(CONNS) == CONNS, "%d fast connections", t_fast_conns());
	return t_shim_finish();
}
