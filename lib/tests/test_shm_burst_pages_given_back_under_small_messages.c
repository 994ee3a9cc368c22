/* SPDX-License-Identifier: MIT */
/* Description: a connection that carried one burst past the first 256 KiB and then goes on with small messages (within 256 KiB, written from the ring's start again) has the burst's pages given back about a second after it drained: the small traffic does not keep them */
/* Channels: shm */
#include "shimtest.h"

#define WITHIN_MS	3000		/* FF_SHM_IDLE_MS and margins */

static void case_small_after_burst(int cfd, int sfd, uint8_t *m)
{
	const uint8_t *past = m + T_PAST_KEEP0;
	int64_t start;

	t_burst_past_keep(cfd, sfd);
	CHECK(t_page_resident(past), "the burst did not reach past 256 KiB");
	start = t_ms();
	while (t_page_resident(past) && t_ms() - start < WITHIN_MS) {
		char c = 'x';

		CHECK(send(cfd, &c, 1, 0) == 1 && recv(sfd, &c, 1, 0) == 1 && c == 'x', "small message lost");
		usleep(10000);
	}
	CHECK(!t_page_resident(past), "the burst's pages past 256 KiB still held %lld ms after it drained, under small messages",
	      (long long)(t_ms() - start));
}

int main(int argc, char **argv)
{
	static void (*const cases[])(int, int, uint8_t *) = { case_small_after_burst };

	(void)argc;
	return t_run_shm_cases(argv, cases, 1);
}
