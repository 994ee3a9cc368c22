/* SPDX-License-Identifier: MIT */
/* Description: a program may unmap memory it registered for remote access and map new memory at the same address before it deregisters (UCX's registration cache does, as malloc and free churn): deregistering then neither touches the unmapped range (it stays unmapped, no crash) nor the new memory, and registering the new memory shares it anew with its bytes intact (before, the provider copied from the unmapped pages and took the new ones for its old shared memory) */
#include <sys/mman.h>

#include "verbstest.h"

#define LEN (64 * 1024)

/* Whether [p, p + len) is a shared mapping (the provider's memfd), per /proc/self/maps. */
static int shared_at(void *p)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512], perm[8];
	unsigned long lo, hi;
	int shared = 0;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perm) == 3 && lo <= (uintptr_t)p && (uintptr_t)p < hi)
			shared = perm[3] == 's';
	if (f)
		fclose(f);
	return shared;
}

int main(int argc, char **argv)
{
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	struct tv_end e;
	struct ibv_mr *m1, *m2;
	unsigned char vec[LEN / 4096];
	uint8_t *buf, *again;

	(void)argc;
	tv_setup(argv);
	tv_device(&e, NULL);

	/* 1: registered, unmapped, deregistered: the range stays as the program left it. */
	buf = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	TV_MUST(buf != MAP_FAILED, "mmap");
	memset(buf, 1, LEN);
	m1 = ibv_reg_mr(e.pd, buf, LEN, acc);
	TV_MUST(m1 && shared_at(buf), "register for remote writes: %s", strerror(errno));
	TV_MUST(munmap(buf, LEN) == 0, "munmap");
	CHECK(ibv_dereg_mr(m1) == 0, "deregister memory the program unmapped");
	CHECK(mincore(buf, LEN, vec) < 0 && errno == ENOMEM, "deregistering mapped something where the program unmapped");

	/* 2: registered, unmapped, new memory there, registered again, then the old region deregistered. */
	buf = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	TV_MUST(buf != MAP_FAILED, "mmap");
	memset(buf, 1, LEN);
	m1 = ibv_reg_mr(e.pd, buf, LEN, acc);
	TV_MUST(m1, "register: %s", strerror(errno));
	TV_MUST(munmap(buf, LEN) == 0, "munmap");
	again = mmap(buf, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	TV_MUST(again == buf, "map new memory at the same address");
	for (int i = 0; i < LEN; i++)
		again[i] = tv_pattern(3, i);
	m2 = ibv_reg_mr(e.pd, again, LEN, acc);
	TV_MUST(m2, "register the new memory: %s", strerror(errno));
	CHECK(shared_at(again), "the new memory was not shared anew (taken for the old region's)");
	tv_intact(again, 3, LEN, "the new memory after its registration");
	CHECK(ibv_dereg_mr(m1) == 0, "deregister the old region");
	CHECK(shared_at(again), "deregistering the old region took the new one's pages back");
	tv_intact(again, 3, LEN, "the new memory after the old region went");
	CHECK(ibv_dereg_mr(m2) == 0 && !shared_at(again), "deregister the new region: its pages private again");
	tv_intact(again, 3, LEN, "the new memory after its own region went");
	return t_exit_code();
}
