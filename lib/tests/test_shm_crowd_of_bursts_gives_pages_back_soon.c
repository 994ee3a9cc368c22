/* SPDX-License-Identifier: MIT */
/* Description: bursts past the first 256 KiB on many connections one after the other: only the 32 channels a process used last (FF_SHM_WARM_CHANNELS) keep their pages the second fewer connections get, those used before them are given back 20 ms after each drain (FF_SHM_CROWD_IDLE_MS) */
/* Channels: shm */
#include "shimtest.h"

#define WARM		32		/* FF_SHM_WARM_CHANNELS */
#define CROWD		(WARM + 4)	/* channels with a burst each */
#define WITHIN_MS	400		/* FF_SHM_CROWD_IDLE_MS and a wake-up, far from a second */

static void case_crowd(int cfd, int sfd, uint8_t *m)
{
	int c[CROWD - 1], s[CROWD - 1], n;
	int64_t ms;

	t_burst_past_keep(cfd, sfd);
	CHECK(t_page_resident(m + T_PAST_KEEP0), "the burst did not reach past 256 KiB");
	for (int i = 0; i < CROWD - 1; i++) {
		t_pair(AF_INET, &c[i], &s[i]);
		CHECK(t_swapped(c[i]), "pair %d is not on shm", i);
		t_burst_past_keep(c[i], s[i]);
	}
	/* The last burst drained just now: without a crowd, every burst would stay a second. */
	n = t_await_bursts_held(WARM, &ms);
	CHECK(n <= WARM, "%d channels still hold pages past 256 KiB %lld ms after the crowd formed, want <= %d",
	      n, (long long)ms, WARM);
	CHECK(ms < WITHIN_MS, "%d channels held pages past 256 KiB for %lld ms after the crowd formed, want < %d",
	      CROWD, (long long)ms, WITHIN_MS);
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
