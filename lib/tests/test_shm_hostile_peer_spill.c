/* SPDX-License-Identifier: MIT */
/* Description: a peer that holds a ring's spill word at FREEING (as if giving its pages back, forever) or writes a value that is no state gets the writer ECONNRESET once its bytes reach past the first 256 KiB of the ring (after at most 1 s for FREEING): the bytes before go through, never a hang */
/* Channels: shm shm-link */
#include "shimtest.h"

/* docs/SHM.md, "Layout". The victim is the connector: it writes ring 0. */
#define SPILL		(1024 + 448)
#define KEEP		(256u << 10)
#define N		(KEEP + (64u << 10))

static void held(int cfd, int sfd, uint8_t *m, uint32_t v, const char *what)
{
	static uint8_t buf[N];
	ssize_t r;

	(void)sfd;
	__atomic_store_n((uint32_t *)(void *)(m + SPILL), v, __ATOMIC_SEQ_CST);
	r = send(cfd, buf, N, MSG_NOSIGNAL);
	CHECK(r == (ssize_t)KEEP, "%s: send of %u bytes gave %zd (%s), want the %u before the spill",
	      what, N, r, strerror(errno), KEEP);
	r = send(cfd, buf, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
	CHECK(r == -1 && errno == ECONNRESET, "%s: the next send gave %zd (%s), want ECONNRESET",
	      what, r, strerror(errno));
}

static void case_freeing_forever(int cfd, int sfd, uint8_t *m)
{
	held(cfd, sfd, m, 3, "spill held at FREEING");
}

static void case_no_state(int cfd, int sfd, uint8_t *m)
{
	held(cfd, sfd, m, 77, "spill holding no state");
}

int main(int argc, char **argv)
{
	static void (*const cases[])(int, int, uint8_t *) = { case_freeing_forever, case_no_state };

	(void)argc;
	return t_run_shm_cases(argv, cases, sizeof(cases) / sizeof(cases[0]));
}
