/* SPDX-License-Identifier: MIT */
/* Description: an idle shared-memory connection costs no CPU: a thread blocked 1 s in recv on an empty ring, or in send on a full one, uses under 2 ms of CPU (it spins once, then sleeps in the kernel) */
/* Channels: shm shm-link */
#include <sys/resource.h>

#include "shimtest.h"

#define RING	(256u << 10)
#define MAX_CPU_US	2000

static int64_t thread_cpu_us(void)
{
	struct rusage ru;

	getrusage(RUSAGE_THREAD, &ru);
	return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 + ru.ru_utime.tv_usec +
	       ru.ru_stime.tv_usec;
}

struct idle {
	int fd;
	int tx;
	int64_t cpu_us;
	ssize_t r;
};

/* Blocks until the main thread ends the wait about 1 s later. */
static void *wait_idle(void *p)
{
	static char big[RING + 1];
	struct idle *w = p;
	int64_t c0 = thread_cpu_us();

	w->r = w->tx ? send(w->fd, big, sizeof(big), 0) : recv(w->fd, big, 1, 0);
	w->cpu_us = thread_cpu_us() - c0;
	return NULL;
}

static void one(int tx)
{
	struct idle w = { .tx = tx };
	char buf[RING + 1];
	pthread_t th;
	int cfd, sfd;

	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(cfd), "not on shm");
	w.fd = cfd;
	pthread_create(&th, NULL, wait_idle, &w);
	sleep(1);
	if (tx)
		CHECK(recv(sfd, buf, sizeof(buf), MSG_WAITALL) == (ssize_t)sizeof(buf), "drain");
	else
		CHECK(send(sfd, "x", 1, 0) == 1, "wake");
	pthread_join(th, NULL);
	CHECK(w.r == (tx ? (ssize_t)sizeof(buf) : 1), "%s returned %zd", tx ? "send" : "recv", w.r);
	CHECK(w.cpu_us < MAX_CPU_US, "blocked 1 s in %s used %lld us of CPU", tx ? "send" : "recv",
	      (long long)w.cpu_us);
	printf("blocked 1 s in %s: %lld us of CPU\n", tx ? "send" : "recv", (long long)w.cpu_us);
	close(cfd);
	close(sfd);
}

int main(int argc, char **argv)
{
	(void)argc;
	setenv("FF_TEST_SHM_RING", "262144", 0);	/* read by the fake agent: the cases fill its rings */
	t_shim_setup(argv, FA_BROKER);
	one(0);
	one(1);
	return t_shim_finish();
}
