/* SPDX-License-Identifier: MIT */
/* Description: ibv_dereg_mr of a remote-access region on the caller's stack, at 16 offsets within the page, gives the pages back private with the caller's frames intact (its copy ran on the caller's stack and smashed it) */
#include <alloca.h>
#include "verbstest.h"

static struct tv_end e;

/* Register a buffer at the low end of this frame, change it, deregister it. */
static int __attribute__((noinline)) round_at(size_t skip)
{
	uint64_t buf[4] = { 1, 2, 3, 4 };
	volatile uint64_t canary = 0x5a5a5a5a;
	struct ibv_mr *m;

	m = ibv_reg_mr(e.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	TV_MUST(m, "reg: %s", strerror(errno));
	buf[0] = 42;
	TV_MUST(ibv_dereg_mr(m) == 0, "dereg");
	CHECK(buf[0] == 42 && buf[3] == 4 && canary == 0x5a5a5a5a, "stack changed at skip %zu", skip);
	return (int)buf[0];
}

static int __attribute__((noinline)) shifted(size_t n)
{
	volatile uint8_t *v = alloca(n + 16);

	v[0] = 0;
	return round_at(n % 8192);
}

int main(int argc, char **argv)
{
	(void)argc;
	tv_setup(argv);
	tv_open(&e);
	for (size_t n = 0; n < 4096; n += 256) {
		CHECK(shifted(n) == 42, "round %zu", n);
	}
	return t_shim_finish();
}
