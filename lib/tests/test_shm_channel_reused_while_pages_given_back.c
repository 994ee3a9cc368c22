/* SPDX-License-Identifier: MIT */
/* Description: a link's channel whose ring pages past the first 256 KiB are being given back (a thread between its CAS to FREEING and its madvise, as the peer's may be) is not reused until that ends: the next connection's burst past 256 KiB arrives intact, none of it read as zero */
/* Channels: shm-link */
#include "shimtest.h"

#define RING	(1u << 20)
#define N	(FF_SHM_KEEP + (64u << 10))	/* past FF_SHM_KEEP, within any writer's cap */

/* The link's channel (the only memfd "freeflow-shm" here), once the acceptor let go of it. */
static uint8_t *idle_channel(void)
{
	uint8_t *m = NULL;

	CHECK(t_maps_named(0, "/memfd:freeflow-shm", &m) == 1 && m, "not one link channel mapped");
	while (t_kept_channels_held())
		usleep(1000);	/* the acceptor's close is in another process: no event to await */
	return m;
}

static int client(uint16_t port, int ctl)
{
	uint8_t *m;
	uint32_t v, *spill;
	int fd;
	char c;

	/* The first through the agent, the second over the link, on a new channel. */
	for (int i = 0; i < 2; i++) {
		fd = t_connect(AF_INET, port);
		CHECK(t_swapped(fd), "connection %d not swapped", i);
		t_exchange_nth(fd, i, N, 1);
		close(fd);
	}
	/*
	 * As a thread giving ring 0's pages back: CAS to FREEING, then (below)
	 * madvise. From NONE too: this process's thread may have given them
	 * back already; the pages it frees next are the next burst's.
	 */
	m = idle_channel();
	spill = (uint32_t *)(void *)(m + T_SPILL0);
	v = __atomic_load_n(spill, __ATOMIC_SEQ_CST);
	CHECK(v <= FF_SPILL_USED && __atomic_compare_exchange_n(spill, &v, FF_SPILL_FREEING, 0,
								 __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST),
	      "ring 0's spill word is %u, neither NONE nor USED, on an idle channel", v);
	fd = t_connect(AF_INET, port);
	CHECK(t_swapped(fd), "connection 2 not swapped");
	CHECK(t_send_stream(fd, N, 2) == 0, "connection 2: send");
	/* The thread's madvise and store: on the channel it holds FREEING, whatever reuses it. */
	madvise(m + FF_SHM_HDR_SIZE + FF_SHM_KEEP, RING - FF_SHM_KEEP, MADV_REMOVE);
	__atomic_store_n(spill, FF_SPILL_NONE, __ATOMIC_SEQ_CST);
	CHECK(write(ctl, "g", 1) == 1, "go");
	CHECK(read(ctl, &c, 1) == 1, "done");
	close(fd);
	return t_exit_code();
}

int main(int argc, char **argv)
{
	int lfd, ctl, fd;
	pid_t pid;
	char c;

	(void)argc;
	pid = t_link_test_start(argv, client, &lfd, &ctl);
	for (int i = 0; i < 2; i++) {
		fd = accept(lfd, NULL, NULL);
		CHECK(fd >= 0 && t_swapped(fd), "connection %d not accepted swapped", i);
		t_exchange_nth(fd, i, N, 0);
		close(fd);
	}
	fd = accept(lfd, NULL, NULL);
	CHECK(fd >= 0 && t_swapped(fd), "connection 2 not accepted swapped");
	CHECK(read(ctl, &c, 1) == 1, "the client never said go");
	CHECK(t_recv_stream(fd, N, 2) == 0,
	      "connection 2: bytes past 256 KiB lost (read as zero) to the give-back of a reused channel");
	CHECK(write(ctl, "d", 1) == 1, "done");
	close(fd);
	t_wait_child(pid, "client");
	close(lfd);
	return t_shim_finish();
}
