/* SPDX-License-Identifier: MIT */
/* Description: waiting on an idle swapped connection in epoll_wait, poll or select (timeouts, then a wake-up after a pause) costs almost no CPU: the waiter sleeps in the kernel after at most a short spin */
/* Channels: unix host-tcp shm shm-link */
#include <sys/resource.h>

#include "readiness_test.h"

#define IDLE_MS		300
/* Far above a spin budget and a few wake-ups; far below waiting busily. */
#define CPU_MAX_MS	60

static int64_t cpu_ms(void)
{
	struct rusage ru;

	getrusage(RUSAGE_THREAD, &ru);
	return ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
}

static void check_cpu(int64_t before, const char *how)
{
	int64_t used = cpu_ms() - before;

	CHECK(used < CPU_MAX_MS, "%s: %lld ms of CPU while idle for %d ms", how, (long long)used,
	      IDLE_MS);
}

int main(int argc, char **argv)
{
	struct timeval tv = { .tv_usec = IDLE_MS * 1000 };
	struct epoll_event ev[4];
	struct pollfd p;
	struct rt_later l;
	int a, b, ep;
	int64_t t0;
	fd_set r;
	char c;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	t_pair(AF_INET, &a, &b);
	CHECK(t_swapped(b), "not swapped");
	ep = epoll_create1(EPOLL_CLOEXEC);
	CHECK(rt_ctl(ep, EPOLL_CTL_ADD, b, EPOLLIN, 1) == 0, "add");

	t0 = cpu_ms();
	CHECK(epoll_wait(ep, ev, 4, IDLE_MS) == 0, "epoll_wait");
	check_cpu(t0, "epoll_wait");

	p = (struct pollfd){ .fd = b, .events = POLLIN };
	t0 = cpu_ms();
	CHECK(poll(&p, 1, IDLE_MS) == 0, "poll");
	check_cpu(t0, "poll");

	FD_ZERO(&r);
	FD_SET(b, &r);
	t0 = cpu_ms();
	CHECK(select(b + 1, &r, NULL, NULL, &tv) == 0, "select");
	check_cpu(t0, "select");

	/* Woken after a pause, with no timeout: no busy wait until the byte came. */
	t0 = cpu_ms();
	rt_write_later(&l, a);
	rt_expect(ep, -1, 1, EPOLLIN, 0, "woken");
	rt_join(&l);
	check_cpu(t0, "epoll_wait until woken");
	CHECK(read(b, &c, 1) == 1, "read");

	close(ep);
	close(a);
	close(b);
	return t_shim_finish();
}
