/* SPDX-License-Identifier: MIT */
/* Description: a ring's pages past the first 256 KiB are given back only once that ring has stayed drained for a second (FF_SHM_IDLE_MS), counted from its own drain, also when another connection's ring queued earlier is due sooner: a burst that drains just before the other is given back keeps its pages */
/* Channels: shm */
#include "shimtest.h"

#define IDLE_MS		1000		/* FF_SHM_IDLE_MS */
#define ROUNDS		3

static int64_t ms_since(const struct timespec *a)
{
	struct timespec b;

	clock_gettime(CLOCK_MONOTONIC, &b);
	return (b.tv_sec - a->tv_sec) * 1000 + (b.tv_nsec - a->tv_nsec) / 1000000;
}

static void case_own_drain(int cfd, int sfd, uint8_t *m)
{
	volatile uint8_t *past = m + T_PAST_KEEP0;
	struct timespec lead = { 0, (IDLE_MS * 3 / 4) * 1000000L }, drained, settle = { 1, 200000000L };
	int other_c, other_s;
	int64_t at;
	uint8_t v;

	t_pair(AF_INET, &other_c, &other_s);
	CHECK(t_swapped(other_c), "the other pair is not on shm");
	for (int i = 0; i < ROUNDS; i++) {
		/* The other connection drains first: queued, due IDLE_MS from now. */
		t_burst_past_keep(other_c, other_s);
		nanosleep(&lead, NULL);	/* sets the case up: this burst drains later */
		t_burst_past_keep(cfd, sfd);
		clock_gettime(CLOCK_MONOTONIC, &drained);
		/* Half of IDLE_MS after our drain (margin for the clock read after it): still there. */
		/* The time after the look: a page read as zero was given back before it. */
		do {
			v = *past;
			at = ms_since(&drained);
		} while (v == 0xab && at < IDLE_MS / 2 && !usleep(1000));
		CHECK(v == 0xab || at >= IDLE_MS / 2,
		      "round %d: pages given back within %lld ms of the drain, before %d ms", i,
		      (long long)at, IDLE_MS);
		nanosleep(&settle, NULL);	/* both given back: the next round starts afresh */
		if (t_failures)
			break;
	}
	close(other_c);
	close(other_s);
}

int main(int argc, char **argv)
{
	static void (*const cases[])(int, int, uint8_t *) = { case_own_drain };

	(void)argc;
	return t_run_shm_cases(argv, cases, 1);
}
