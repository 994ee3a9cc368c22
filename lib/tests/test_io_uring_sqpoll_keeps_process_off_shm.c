/* SPDX-License-Identifier: MIT */
/* Description: an io_uring the library cannot follow (SQPOLL: the kernel takes submissions without io_uring_enter) keeps the process off shm: its shm connection moves down at once, bytes intact both ways, a later connection moves down right after its swap, and 300 connections in a row from a client on shm that writes at once (over a link, with shm-link, until the process drops its links) all stay intact, none reset */
/* Channels: shm shm-link */
#include <linux/io_uring.h>

#include "shimtest.h"

#define N	100000
#define CONNS	300

static int client(uint16_t port)
{
	for (int i = 0; i < CONNS; i++) {
		int fd = t_connect_nth(port, i);

		t_exchange_nth(fd, i, 3000, 1);
		close(fd);
	}
	return t_exit_code();
}

/* Accept and exchange CONNS connections, each on its kernel channel (no shm mapping left). */
static void serve(int conns)
{
	pid_t pid;
	int lfd = t_fork_client(client, &pid), fd;

	for (int i = 0; i < conns; i++) {
		fd = accept(lfd, NULL, NULL);
		CHECK(fd >= 0 && t_real_domain(fd) == AF_UNIX, "accept %d: %s", i, strerror(errno));
		t_exchange_nth(fd, i, 3000, 0);
		close(fd);
	}
	CHECK(t_shm_maps() == 0, "%d shm mappings left", t_shm_maps());
	t_wait_child(pid, "client");
	close(lfd);
}

int main(int argc, char **argv)
{
	struct io_uring_params p = { .flags = IORING_SETUP_SQPOLL, .sq_thread_idle = 100 };
	int cfd, sfd, c2, s2, ring;
	ino_t bell;

	(void)argc;
	t_setup_swapped_pair(argv, &cfd, &sfd);
	bell = t_ino(sfd);
	ring = (int)syscall(SYS_io_uring_setup, 4, &p);
	if (ring < 0) {
		printf("no SQPOLL io_uring here: %s\n", strerror(errno));
		return T_EXIT_SKIP;
	}
	CHECK(t_moved_down(sfd, bell), "the shm connection stayed on shm after an SQPOLL ring");
	t_both_ways(cfd, sfd, N, 3, "moved down");
	t_pair(AF_INET, &c2, &s2);
	CHECK(t_real_domain(s2) == AF_UNIX && t_shm_maps() == 0,
	      "a later connection is on shm (%d shm mappings)", t_shm_maps());
	t_both_ways(c2, s2, N, 3, "later connection");
	serve(CONNS);
	close(ring);
	close(c2);
	close(s2);
	close(cfd);
	close(sfd);
	return t_shim_finish();
}
