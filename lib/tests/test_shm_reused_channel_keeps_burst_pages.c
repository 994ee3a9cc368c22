/* SPDX-License-Identifier: MIT */
/* Description: a link's channel reused right after a connection that wrote a burst past the first 256 KiB is the same memfd with those pages still in memory when the next connection starts (its burst writes into warm pages, no page faults), also while the drained ring waits to be given back, and the next connection's bytes arrive intact */
/* Channels: shm-link */
#include "shimtest.h"

#define N	(FF_SHM_KEEP + (64u << 10))	/* past FF_SHM_KEEP, within any writer's cap */

/*
 * Connection i's burst each way, compared. The client's is written whole
 * before the server reads (ctl says when), so it lies past FF_SHM_KEEP in ring 0.
 */
static void burst(int fd, int i, int ctl, int client)
{
	static uint8_t out[N], in[N];
	char c = 's';

	memset(out, 'a' + i, sizeof(out));
	if (client) {
		CHECK(send(fd, out, N, MSG_DONTWAIT) == (ssize_t)N, "connection %d: burst not taken at once", i);
		CHECK(write(ctl, &c, 1) == 1, "sent");
	} else {
		CHECK(read(ctl, &c, 1) == 1, "the client never said sent");
	}
	CHECK(recv(fd, in, N, MSG_WAITALL) == (ssize_t)N && !memcmp(in, out, N),
	      "connection %d: burst lost or changed", i);
	if (!client)
		CHECK(send(fd, in, N, 0) == (ssize_t)N, "connection %d: echo", i);
}

static int client(uint16_t port, int ctl)
{
	uint8_t *m = NULL;
	int fd;

	/* The first through the agent, the second over the link, on the link's channel. */
	for (int i = 0; i < 3; i++) {
		fd = t_connect(AF_INET, port);
		CHECK(t_swapped(fd), "connection %d not swapped", i);
		if (i == 2) {	/* the reuse happened in connect(), before any byte of this one */
			CHECK(t_maps_named(0, "/memfd:freeflow-shm", &m) == 1,
			      "connection 2 made a new channel instead of reusing the idle one");
			CHECK(m && t_page_resident(m + T_PAST_KEEP0),
			      "the reused channel's pages past 256 KiB were given back: its burst faults them in");
		}
		burst(fd, i, ctl, 1);
		close(fd);
		if (i != 1)
			continue;
		CHECK(t_maps_named(0, "/memfd:freeflow-shm", &m) == 1 && m, "not one link channel mapped");
		if (!m)
			break;
		CHECK(__atomic_load_n((uint32_t *)(void *)(m + T_SPILL0), __ATOMIC_SEQ_CST) == FF_SPILL_USED,
		      "connection 1's burst did not reach past 256 KiB");
		while (t_kept_channels_held())
			usleep(1000);	/* the acceptor's close is in another process: no event to await */
	}
	return t_exit_code();
}

int main(int argc, char **argv)
{
	int lfd, fd, ctl;
	pid_t pid;

	(void)argc;
	pid = t_link_test_start(argv, client, &lfd, &ctl);
	for (int i = 0; i < 3; i++) {
		fd = accept(lfd, NULL, NULL);
		CHECK(fd >= 0 && t_swapped(fd), "connection %d not accepted swapped", i);
		burst(fd, i, ctl, 0);
		close(fd);
	}
	t_wait_child(pid, "client");
	close(lfd);
	return t_shim_finish();
}
