/* SPDX-License-Identifier: MIT */
/* Description: a burst past the first 256 KiB that the acceptor wrote to a process that read it and exited at once is given back by the acceptor's own process within a second or so of its close, though the channel stays mapped in its link: only the reader had queued the ring, at its drain, and its thread died with it */
/* Channels: shm-link */
#include "shimtest.h"

#define RING		(1u << 20)	/* FF_TEST_SHM_RING below */
#define N		(FF_SHM_KEEP + (64u << 10))
#define WITHIN_MS	3000		/* FF_SHM_IDLE_MS and margins */

static int client(uint16_t port, int ctl)
{
	static uint8_t in[N];
	char c;
	int fd;

	/* The first through the agent, the second over the link, on the link's channel. */
	for (int i = 0; i < 2; i++) {
		fd = t_connect(AF_INET, port);
		CHECK(t_swapped(fd), "connection %d not swapped", i);
		CHECK(read(ctl, &c, 1) == 1, "the server never said sent");
		CHECK(recv(fd, in, N, MSG_WAITALL) == (ssize_t)N, "connection %d: burst lost", i);
		close(fd);
	}
	return t_exit_code();	/* at once: this process's thread never gives the burst back */
}

int main(int argc, char **argv)
{
	static uint8_t out[N];
	uint8_t *m = NULL;
	int lfd, fd, ctl;
	int64_t start;
	pid_t pid;

	(void)argc;
	pid = t_link_test_start(argv, client, &lfd, &ctl);
	memset(out, 0xab, sizeof(out));
	for (int i = 0; i < 2; i++) {
		fd = accept(lfd, NULL, NULL);
		CHECK(fd >= 0 && t_swapped(fd), "connection %d not accepted swapped", i);
		CHECK(send(fd, out, N, MSG_DONTWAIT) == (ssize_t)N, "connection %d: burst not taken at once", i);
		CHECK(write(ctl, "s", 1) == 1, "sent");
		close(fd);
	}
	t_wait_child(pid, "client");
	CHECK(t_maps_named(0, "/memfd:freeflow-shm", &m) == 1 && m, "the link's channel is not mapped here");
	if (m) {
		const uint8_t *past = m + T_PAST_KEEP0 + RING;	/* ring 1 */

		start = t_ms();
		while (t_page_resident(past) && t_ms() - start < WITHIN_MS)
			usleep(10000);
		CHECK(!t_page_resident(past), "the burst's pages past 256 KiB still held %lld ms after the reader exited",
		      (long long)(t_ms() - start));
	}
	close(lfd);
	return t_shim_finish();
}
