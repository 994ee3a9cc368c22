/* SPDX-License-Identifier: MIT */
/* Description: a ring set up with liburing (a shared library, whose submissions are inline system calls the library cannot see) keeps the process off shm: its shm connection moves down at io_uring_queue_init, bytes intact both ways, and a later connection does not stay on shm */
/* Channels: shm */
#include "shimtest.h"

#define N	100000

int main(int argc, char **argv)
{
	/* struct io_uring is 216 bytes in liburing 2.x; the program owns it. */
	_Alignas(64) uint8_t ring[1024] = { 0 };
	int (*init)(unsigned, void *, unsigned);
	void (*fini)(void *);
	int cfd, sfd, c2, s2;
	ino_t bell;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	t_liburing(&init, &fini);
	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(sfd), "the pair is not swapped");
	bell = t_ino(sfd);
	CHECK(init && fini && init(4, ring, 0) == 0, "io_uring_queue_init failed");
	CHECK(t_moved_down(sfd, bell), "the shm connection stayed on shm after liburing set up a ring");
	t_both_ways(cfd, sfd, N, 5, "moved down");
	t_pair(AF_INET, &c2, &s2);
	CHECK(t_real_domain(s2) == AF_UNIX && t_shm_maps() == 0,
	      "a later connection is on shm (%d shm mappings)", t_shm_maps());
	t_both_ways(c2, s2, N, 5, "later connection");
	if (fini)
		fini(ring);
	close(c2);
	close(s2);
	close(cfd);
	close(sfd);
	return t_shim_finish();
}
