/* SPDX-License-Identifier: MIT */
/* Description: a peer that holds a ring's spill word at FREEING (as if giving its pages back, forever) keeps the writer within the first 256 KiB of the ring: what fits goes through, then EAGAIN (never ECONNRESET, never a hang), and once the peer reads, the writer goes on there; a peer that writes a value that is no state gets the writer ECONNRESET once its bytes reach past the first 256 KiB: the bytes before go through */
/* Channels: shm shm-link */
#include "shimtest.h"

/* The victim is the connector: it writes ring 0 (T_SPILL0). */
#define N		(FF_SHM_KEEP + (64u << 10))

/* The peer writes v into the spill word; the victim sends N: the KEEP bytes before the spill go through. */
static void held(int cfd, uint8_t *m, uint32_t v, const char *what)
{
	static uint8_t buf[N];
	ssize_t r;

	__atomic_store_n((uint32_t *)(void *)(m + T_SPILL0), v, __ATOMIC_SEQ_CST);
	r = send(cfd, buf, N, MSG_NOSIGNAL | MSG_DONTWAIT);
	CHECK(r == (ssize_t)FF_SHM_KEEP,
	      "%s: send of %u bytes gave %zd (%s), want the %u before the spill", what, N, r,
	      strerror(errno), FF_SHM_KEEP);
}

static void case_freeing_forever(int cfd, int sfd, uint8_t *m)
{
	ssize_t r;

	held(cfd, m, FF_SPILL_FREEING, "spill held at FREEING");
	r = send(cfd, "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
	CHECK(r == -1 && errno == EAGAIN, "spill held at FREEING: the next send gave %zd (%s), want EAGAIN",
	      r, strerror(errno));
	/* The peer reads it all: the ring is empty, the writer starts again within FF_SHM_KEEP. */
	CHECK(recv(sfd, (uint8_t[FF_SHM_KEEP]){ 0 }, FF_SHM_KEEP, MSG_WAITALL) ==
	      (ssize_t)FF_SHM_KEEP, "spill held at FREEING: the peer could not read the bytes sent");
	r = send(cfd, (uint8_t[N - FF_SHM_KEEP]){ 0 }, N - FF_SHM_KEEP, MSG_NOSIGNAL | MSG_DONTWAIT);
	CHECK(r == (ssize_t)(N - FF_SHM_KEEP), "spill held at FREEING, ring empty: send of %u gave %zd (%s)",
	      N - FF_SHM_KEEP, r, strerror(errno));
}

static void case_no_state(int cfd, int sfd, uint8_t *m)
{
	ssize_t r;

	(void)sfd;
	held(cfd, m, 77, "spill holding no state");
	r = send(cfd, "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
	CHECK(r == -1 && errno == ECONNRESET, "spill holding no state: the next send gave %zd (%s), "
	      "want ECONNRESET", r, strerror(errno));
}

int main(int argc, char **argv)
{
	static void (*const cases[])(int, int, uint8_t *) = { case_freeing_forever, case_no_state };

	(void)argc;
	return t_run_shm_cases(argv, cases, sizeof(cases) / sizeof(cases[0]));
}
