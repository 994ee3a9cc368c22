/* SPDX-License-Identifier: MIT */
/* Description: 10 000 shared-memory connections open at once between two processes fit (every end mapped, little memory resident), each carries its byte both ways, and closing them all unmaps every ring but those a link keeps for reuse */
/* Channels: shm shm-link */
#include <sys/resource.h>

#include "shimtest.h"

#define CONNS		10000
/* Resident memory of one process holding CONNS idle ends: a ring's pages are touched only when used. */
#define MAX_RSS_MB	256

static int fds[CONNS];

static long rss_mb(void)
{
	long size = 0, rss = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f) {
		if (fscanf(f, "%ld %ld", &size, &rss) != 2)
			rss = 0;
		fclose(f);
	}
	return rss * sysconf(_SC_PAGESIZE) / (1 << 20);
}

/* Both processes hold CONNS ends, plus a few fds of their own. */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_max < CONNS + 64) {
		fprintf(stderr, "RLIMIT_NOFILE hard limit %lu is below %d: raise it to run this test\n",
			(unsigned long)rl.rlim_max, CONNS + 64);
		exit(T_EXIT_FAIL);
	}
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl)) {
		perror("setrlimit");
		exit(T_EXIT_FAIL);
	}
}

/* Channels that stay mapped at each end once all are closed: those a link keeps (link.c). */
static int kept(void)
{
	return fa_link() ? 32 : 0;	/* CHANS_MAX (link.c) */
}

/* Exit status: 0, or the step that failed. */
static int server(int lfd, int ready)
{
	char c;

	for (int i = 0; i < CONNS; i++)
		if ((fds[i] = accept(lfd, NULL, NULL)) < 0)
			return 2;
	if (t_shm_maps() != CONNS || rss_mb() > MAX_RSS_MB)
		return 3;
	if (write(ready, "a", 1) != 1)
		return 4;
	for (int i = 0; i < CONNS; i++)
		if (read(fds[i], &c, 1) != 1 || c != (char)(i % 251) || write(fds[i], &c, 1) != 1)
			return 5;
	for (int i = 0; i < CONNS; i++) {
		if (read(fds[i], &c, 1) != 0)
			return 6;
		close(fds[i]);
	}
	return t_shm_maps() == kept() ? 0 : 7;
}

int main(int argc, char **argv)
{
	uint16_t port;
	int lfd, ready, bad = 0;
	char c;
	pid_t pid;

	(void)argc;
	raise_nofile();
	t_shim_setup(argv, FA_BROKER);
	/* lfd stays open here: the fake agent keeps one registration per port, which our close would withdraw. */
	pid = t_fork_peer(server, &lfd, &port, &ready);
	for (int i = 0; i < CONNS; i++)
		fds[i] = t_connect(AF_INET, port);
	CHECK(t_swapped(fds[0]) && t_swapped(fds[CONNS - 1]), "not on shm");
	CHECK(t_shm_maps() == CONNS, "%d rings mapped, want %d", t_shm_maps(), CONNS);
	CHECK(read(ready, &c, 1) == 1, "the server did not get all %d connections on shm within %d MiB",
	      CONNS, MAX_RSS_MB);
	printf("%d connections open: %ld MiB resident here\n", CONNS, rss_mb());
	CHECK(rss_mb() <= MAX_RSS_MB, "%ld MiB resident, want <= %d", rss_mb(), MAX_RSS_MB);
	for (int i = 0; i < CONNS; i++) {
		c = (char)(i % 251);
		if (write(fds[i], &c, 1) != 1 || read(fds[i], &c, 1) != 1 || c != (char)(i % 251))
			bad++;
	}
	CHECK(bad == 0, "%d connections lost their byte", bad);
	for (int i = 0; i < CONNS; i++)
		close(fds[i]);
	CHECK(t_shm_maps() == kept(), "%d rings still mapped after closing all, want %d",
	      t_shm_maps(), kept());
	t_wait_child(pid, "server (status = the step that failed)");
	close(lfd);
	CHECK(t_fast_await(CONNS) == CONNS, "%d fast connections, want %d", t_fast_conns(), CONNS);
	return t_shim_finish();
}
