/* SPDX-License-Identifier: MIT */
/* Description: a program whose first call the library wraps is liburing's ring set-up (an io_uring server setting up its ring at the top of main) is kept off shm as one that set it up later: its connections made after go on a kernel channel, bytes intact both ways */
/* Channels: shm */
#include "shimtest.h"

#define N	100000

int main(int argc, char **argv)
{
	/* struct io_uring is 216 bytes in liburing 2.x; the program owns it. */
	_Alignas(64) uint8_t ring[1024] = { 0 };
	int (*init)(unsigned, void *, unsigned);
	void (*fini)(void *);
	int cfd, sfd;

	(void)argc;
	/* In the preloaded image this returns before any call the library wraps. */
	t_shim_setup(argv, FA_BROKER);
	t_liburing(&init, &fini);
	CHECK(init && fini && init(4, ring, 0) == 0, "io_uring_queue_init failed");
	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_real_domain(sfd) == AF_UNIX && t_shm_maps() == 0,
	      "a connection made after the ring is on shm (%d shm mappings)", t_shm_maps());
	t_both_ways(cfd, sfd, N, 5, "after the ring");
	fini(ring);
	close(cfd);
	close(sfd);
	return t_shim_finish();
}
