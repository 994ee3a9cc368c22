/* SPDX-License-Identifier: MIT */
/* Description: a registration that fails half way (a page shared the other way) leaves the pages it had shared private again, so another region of them works; deregistering gives a read-only page back read-only */
#include "verbstest.h"

static int perms_of(void *p, char out[8])
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int found = 0;

	while (f && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, out) == 3 && lo <= (uintptr_t)p && (uintptr_t)p < hi) {
			found = 1;
			break;
		}
	}
	if (f)
		fclose(f);
	return found;
}

int main(int argc, char **argv)
{
	struct tv_end e;
	uint8_t *p = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *ro, *w, *ro2;
	char perm[8];
	uint8_t *q;

	(void)argc;
	tv_setup(argv);
	tv_open(&e);
	memset(p, 7, 3 * 4096);
	/* Page 1 read-only shared; then a writable region over pages 0-1 fails (as documented)... */
	ro = ibv_reg_mr(e.pd, p + 4096, 4096, IBV_ACCESS_REMOTE_READ);
	TV_MUST(ro, "ro: %s", strerror(errno));
	w = ibv_reg_mr(e.pd, p, 2 * 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(!w && errno == EINVAL, "mixed kinds: %p %s", (void *)w, strerror(errno));
	/* ...and must leave page 0 as it was: private, so a read-only region of it works. */
	CHECK(perms_of(p, perm) && perm[3] == 'p', "page 0 left %s after the failed registration", perm);
	ro2 = ibv_reg_mr(e.pd, p, 4096, IBV_ACCESS_REMOTE_READ);
	CHECK(ro2, "a read-only region of page 0 after the failure: %s", strerror(errno));
	/* A read-only mapping registered for remote reads comes back read-only. */
	q = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ro = ibv_reg_mr(e.pd, q, 4096, IBV_ACCESS_REMOTE_READ);
	TV_MUST(ro, "reg a PROT_READ page: %s", strerror(errno));
	CHECK(perms_of(q, perm) && perm[1] == '-', "while registered: %s", perm);
	TV_MUST(ibv_dereg_mr(ro) == 0, "dereg");
	CHECK(perms_of(q, perm) && strncmp(perm, "r--p", 4) == 0, "after dereg the PROT_READ page is %s", perm);
	return t_shim_finish();
}
