/* SPDX-License-Identifier: MIT */
/* Description: while more than 32 channels of a process wait with drained bursts past the first 256 KiB (FF_SHM_WARM_CHANNELS), their pages are given back 20 ms after each drain (FF_SHM_CROWD_IDLE_MS), not the second a few connections get: bursts on many connections one after the other pin no more than a few bursts' memory */
/* Channels: shm */
#include "shimtest.h"

#include <sys/mman.h>

#define KEEP		(256u << 10)	/* FF_SHM_KEEP */
#define N		(KEEP + (64u << 10))
#define CROWD		34		/* channels: more than FF_SHM_WARM_CHANNELS */
#define WITHIN_MS	400		/* FF_SHM_CROWD_IDLE_MS and a wake-up, far from a second */

static int64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static void burst(int cfd, int sfd)
{
	static uint8_t out[N], in[N];

	memset(out, 0xab, sizeof(out));
	CHECK(send(cfd, out, N, MSG_DONTWAIT) == (ssize_t)N, "burst of %u not taken at once", N);
	CHECK(recv(sfd, in, N, MSG_WAITALL) == (ssize_t)N && !memcmp(in, out, N), "burst lost");
}

static int resident(const uint8_t *p)
{
	unsigned char v = 0;

	return mincore((void *)((uintptr_t)p & ~(uintptr_t)4095), 4096, &v) == 0 && (v & 1);
}

static void case_crowd(int cfd, int sfd, uint8_t *m)
{
	const uint8_t *past = m + 4096 + KEEP + 4096;	/* ring 0, a page past KEEP */
	int c[CROWD - 1], s[CROWD - 1];
	int64_t start;

	burst(cfd, sfd);
	CHECK(resident(past), "the burst did not reach past 256 KiB");
	for (int i = 0; i < CROWD - 1; i++) {
		t_pair(AF_INET, &c[i], &s[i]);
		CHECK(t_swapped(c[i]), "pair %d is not on shm", i);
		burst(c[i], s[i]);
	}
	start = now_ms();
	while (resident(past) && now_ms() - start < 2000)
		usleep(5000);
	CHECK(!resident(past), "pages past 256 KiB still held %lld ms after the crowd formed",
	      (long long)(now_ms() - start));
	CHECK(now_ms() - start < WITHIN_MS, "pages past 256 KiB given back %lld ms after the crowd formed, want < %d",
	      (long long)(now_ms() - start), WITHIN_MS);
	for (int i = 0; i < CROWD - 1; i++) {
		close(c[i]);
		close(s[i]);
	}
}

int main(int argc, char **argv)
{
	static void (*const cases[])(int, int, uint8_t *) = { case_crowd };

	(void)argc;
	return t_run_shm_cases(argv, cases, 1);
}
