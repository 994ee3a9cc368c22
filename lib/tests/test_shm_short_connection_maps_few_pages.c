/* SPDX-License-Identifier: MIT */
/* Description: a short shared-memory connection (one byte each way) has only the pages it touched in memory, not both rings: attaching does not populate the mapping, which cost ~0.3 ms per end at every connect and accept and pinned 516 KiB per idle connection */
/* Channels: shm shm-link */
#include "shimtest.h"

#define RING		(256u << 10)
/*
 * What one byte each way touches: the header page and the first page of
 * each ring (12 KiB), each of which may be a large folio (shmem mTHP) of up
 * to 64 KiB; a populated mapping has all 516 KiB in.
 */
#define MAX_RSS_KB	(3 * 64)

/* Rss of each mapping of the fake agent's memfds ("ff-shm"), in KiB; how many were found. */
static int ring_rss_kb(long *kb, int max)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	int n = 0, in_ring = 0;

	CHECK(f != NULL, "open /proc/self/smaps");
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long from, to;
		long v;

		/* A mapping's first line: "from-to perms offset dev inode path". */
		if (sscanf(line, "%lx-%lx ", &from, &to) == 2) {
			in_ring = strstr(line, "/memfd:ff-shm") != NULL;
			continue;
		}
		if (in_ring && sscanf(line, "Rss: %ld kB", &v) == 1 && n < max)
			kb[n++] = v;
	}
	if (f)
		fclose(f);
	return n;
}

int main(int argc, char **argv)
{
	long kb[4];
	char b;
	int cfd, sfd, n;

	(void)argc;
	setenv("FF_TEST_SHM_RING", "262144", 1);
	t_shim_setup(argv, FA_BROKER);
	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(cfd) && t_swapped(sfd), "not on shm");
	CHECK(send(cfd, "x", 1, 0) == 1 && recv(sfd, &b, 1, 0) == 1 && b == 'x', "request");
	CHECK(send(sfd, "y", 1, 0) == 1 && recv(cfd, &b, 1, 0) == 1 && b == 'y', "answer");
	n = ring_rss_kb(kb, 4);
	CHECK(n == 2, "found %d mappings of the rings, want 2 (one per end)", n);
	for (int i = 0; i < n; i++) {
		CHECK(kb[i] <= MAX_RSS_KB, "end %d has %ld KiB of its %u KiB mapping in memory, want <= %d",
		      i, kb[i], (FF_SHM_HDR_SIZE + 2 * RING) / 1024, MAX_RSS_KB);
		printf("end %d: %ld KiB of the mapping in memory\n", i, kb[i]);
	}
	close(cfd);
	close(sfd);
	return t_shim_finish();
}
