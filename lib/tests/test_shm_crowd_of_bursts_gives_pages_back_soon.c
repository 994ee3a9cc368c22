/* SPDX-License-Identifier: MIT */
/* Description: bursts past the first 256 KiB on many connections one after the other: only the 32 channels a process queued last (FF_SHM_WARM_CHANNELS) keep their pages the second fewer connections get, those queued before them are given back 20 ms after each drain (FF_SHM_CROWD_IDLE_MS) */
/* Channels: shm */
#include "shimtest.h"

#define N		(FF_SHM_KEEP + (64u << 10))
#define WARM		32		/* FF_SHM_WARM_CHANNELS */
#define CROWD		(WARM + 4)	/* channels with a burst each */
#define WITHIN_MS	400		/* FF_SHM_CROWD_IDLE_MS and a wake-up, far from a second */

static void burst(int cfd, int sfd)
{
	static uint8_t out[N], in[N];

	memset(out, 0xab, sizeof(out));
	CHECK(send(cfd, out, N, MSG_DONTWAIT) == (ssize_t)N, "burst of %u not taken at once", N);
	CHECK(recv(sfd, in, N, MSG_WAITALL) == (ssize_t)N && !memcmp(in, out, N), "burst lost");
}

/*
 * Channels whose ring 0 still holds a page past FF_SHM_KEEP (each burst put one
 * there): each is mapped twice here, once per end, counted once (its inode).
 */
static int held(void)
{
	unsigned long lo, ino, seen[2 * CROWD + 2];
	char line[512];
	FILE *f = fopen("/proc/self/maps", "r");
	int n = 0, dup;

	while (f && fgets(line, sizeof(line), f)) {
		if (!strstr(line, "/memfd:ff-shm") || sscanf(line, "%lx-%*x %*s %*x %*s %lu", &lo, &ino) != 2 ||
		    !t_page_resident((const uint8_t *)lo + T_PAST_KEEP0))
			continue;
		dup = 0;
		for (int i = 0; i < n; i++)
			dup |= seen[i] == ino;
		if (!dup && n < 2 * CROWD + 2)
			seen[n++] = ino;
	}
	if (f)
		fclose(f);
	return n;
}

static void case_crowd(int cfd, int sfd, uint8_t *m)
{
	int c[CROWD - 1], s[CROWD - 1], n;
	int64_t start;

	burst(cfd, sfd);
	CHECK(t_page_resident(m + T_PAST_KEEP0), "the burst did not reach past 256 KiB");
	for (int i = 0; i < CROWD - 1; i++) {
		t_pair(AF_INET, &c[i], &s[i]);
		CHECK(t_swapped(c[i]), "pair %d is not on shm", i);
		burst(c[i], s[i]);
	}
	/* The last burst drained just now: without a crowd, every burst would stay a second. */
	start = t_ms();
	while ((n = held()) > WARM && t_ms() - start < 2000)
		usleep(5000);
	CHECK(n <= WARM, "%d channels still hold pages past 256 KiB %lld ms after the crowd formed, want <= %d",
	      n, (long long)(t_ms() - start), WARM);
	CHECK(t_ms() - start < WITHIN_MS, "%d channels held pages past 256 KiB for %lld ms after the crowd formed, want < %d",
	      CROWD, (long long)(t_ms() - start), WITHIN_MS);
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
