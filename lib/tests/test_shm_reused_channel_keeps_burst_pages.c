/* SPDX-License-Identifier: MIT */
/* Description: a link's channel reused right after a connection that wrote a burst past the first 256 KiB is the same memfd with those pages still in memory (the next burst writes into warm pages, no page faults), also while its drained ring waits to be given back, and the next connection's bytes arrive intact */
/* Channels: shm-link */
#include "shimtest.h"

#include <sys/mman.h>

#define KEEP	(256u << 10)	/* FF_SHM_KEEP */
#define N	(KEEP + (64u << 10))	/* past KEEP, within any writer's cap */

/*
 * One burst each way, each written whole before the peer reads (so it
 * lies past KEEP in its ring), compared: the client's byte i, the echo.
 */
static void burst(int fd, int i, int client)
{
	static uint8_t out[N], in[N];

	memset(out, 'a' + i, sizeof(out));
	if (client)
		CHECK(send(fd, out, N, MSG_DONTWAIT) == (ssize_t)N, "connection %d: burst not taken at once", i);
	CHECK(recv(fd, in, N, MSG_WAITALL) == (ssize_t)N && !memcmp(in, out, N),
	      "connection %d: burst lost or changed", i);
	if (!client)
		CHECK(send(fd, in, N, MSG_DONTWAIT) == (ssize_t)N, "connection %d: echo not taken at once", i);
}

/* Whether the page at p (in a mapping) is in memory. */
static int resident(const uint8_t *p)
{
	unsigned char v = 0;

	return mincore((void *)((uintptr_t)p & ~(uintptr_t)4095), 4096, &v) == 0 && (v & 1);
}

static int client(uint16_t port)
{
	uint8_t *m = NULL;
	int fd;

	/* The first through the agent, the second over the link, on the link's channel. */
	for (int i = 0; i < 3; i++) {
		fd = t_connect(AF_INET, port);
		CHECK(t_swapped(fd), "connection %d not swapped", i);
		burst(fd, i, 1);
		close(fd);
		if (i != 1)
			continue;
		CHECK(t_maps_named(0, "/memfd:freeflow-shm", &m) == 1 && m, "not one link channel mapped");
		while (t_kept_channels_held())
			usleep(1000);	/* the acceptor's close is in another process: no event to await */
		CHECK(resident(m + 4096 + KEEP + 4096), "the burst's pages past 256 KiB are gone at once");
	}
	CHECK(t_maps_named(0, "/memfd:freeflow-shm", &m) == 1,
	      "connection 2 made a new channel instead of reusing the idle one");
	CHECK(resident(m + 4096 + KEEP + 4096),
	      "the reused channel's pages past 256 KiB were given back: the next burst faults them in");
	return t_exit_code();
}

int main(int argc, char **argv)
{
	uint16_t port;
	int lfd, fd;
	pid_t pid;

	(void)argc;
	setenv("FF_TEST_SHM_RING", "1048576", 0);	/* read by the fake agent: room past KEEP */
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen(AF_INET, &port);
	pid = fork();
	if (pid == 0)
		_exit(client(port));
	for (int i = 0; i < 3; i++) {
		fd = accept(lfd, NULL, NULL);
		CHECK(fd >= 0 && t_swapped(fd), "connection %d not accepted swapped", i);
		burst(fd, i, 0);
		close(fd);
	}
	t_wait_child(pid, "client");
	close(lfd);
	return t_shim_finish();
}
