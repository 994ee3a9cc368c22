/* SPDX-License-Identifier: MIT */
/* Description: a channel that carries a burst past the first 256 KiB again and again while bursts on many other connections form a crowd keeps its pages the second after its last burst: the FF_SHM_WARM_CHANNELS that keep them are the channels used last, not those queued last (a Node.js server's busiest channels, queued first, had their pages given back 20 ms after each echo of 1 MiB and faulted them in again: 217 000 page faults per 1 088 echoes) */
/* Channels: shm */
#include "shimtest.h"

#define WARM	32		/* FF_SHM_WARM_CHANNELS */
#define CROWD	(WARM + 4)	/* channels with a burst each, besides the busy one */

static void case_busy_channel_in_crowd(int cfd, int sfd, uint8_t *m)
{
	int c[CROWD], s[CROWD], n;
	int64_t ms;

	/* The busy channel is queued first, then used after every other burst. */
	t_burst_past_keep(cfd, sfd);
	for (int i = 0; i < CROWD; i++) {
		t_pair(AF_INET, &c[i], &s[i]);
		CHECK(t_swapped(c[i]), "pair %d is not on shm", i);
		t_burst_past_keep(c[i], s[i]);
		t_burst_past_keep(cfd, sfd);
	}
	/* The crowd is given back 20 ms after its drains (test_shm_crowd_of_bursts_gives_pages_back_soon). */
	n = t_await_bursts_held(WARM, &ms);
	CHECK(n <= WARM, "%d channels still hold pages past 256 KiB %lld ms after the crowd formed, want <= %d",
	      n, (long long)ms, WARM);
	CHECK(t_burst_held_at(m), "the channel used last had its burst's pages given back %lld ms after its "
	      "last burst, with the crowd (its next burst faults them in again)", (long long)ms);
	for (int i = 0; i < CROWD; i++) {
		close(c[i]);
		close(s[i]);
	}
}

int main(int argc, char **argv)
{
	static void (*const cases[])(int, int, uint8_t *) = { case_busy_channel_in_crowd };

	(void)argc;
	return t_run_shm_cases(argv, cases, 1);
}
