/* SPDX-License-Identifier: MIT */
/* Description: 10 GB through a shared-memory connection between two processes arrive complete, in order and intact (every byte compared), then EOF */
/* Channels: shm shm-link */
#include "shimtest.h"

#define TOTAL	(10ull * 1000 * 1000 * 1000)
#define BLOCK	(1u << 20)

/*
 * The stream is a 1 MiB random block repeated, with the block's number in
 * its first 8 bytes: a lost, repeated or misplaced block shows.
 */
static uint8_t base[BLOCK];

static void stamp(uint8_t *blk, uint64_t k)
{
	memcpy(blk, &k, sizeof(k));
}

static int sender(uint16_t port)
{
	static uint8_t blk[BLOCK];
	uint64_t sent = 0;
	int fd = t_connect(AF_INET, port);

	memcpy(blk, base, BLOCK);
	while (sent < TOTAL) {
		size_t off = 0, len = TOTAL - sent < BLOCK ? (size_t)(TOTAL - sent) : BLOCK;

		stamp(blk, sent / BLOCK);
		while (off < len) {
			ssize_t w = write(fd, blk + off, len - off);

			if (w <= 0) {
				perror("sender write");
				return 1;
			}
			off += (size_t)w;
		}
		sent += len;
	}
	close(fd);
	return 0;
}

/* Compare r bytes received at stream offset off with what was sent there. */
static int matches(const uint8_t *buf, size_t r, uint64_t off)
{
	while (r) {
		size_t in = (size_t)(off % BLOCK), n = BLOCK - in < r ? BLOCK - in : r;
		size_t skip = in < 8 ? 8 - in : 0;
		uint8_t want[8];

		stamp(want, off / BLOCK);
		for (size_t i = in; i < 8 && i < in + n; i++)
			if (buf[i - in] != want[i])
				return 0;
		if (n > skip && memcmp(buf + skip, base + in + skip, n - skip))
			return 0;
		buf += n;
		r -= n;
		off += n;
	}
	return 1;
}

int main(int argc, char **argv)
{
	static uint8_t buf[BLOCK];
	uint64_t got = 0, seed = 0x5eed5eed;
	int lfd, sfd, bad = 0;
	uint16_t port;
	int64_t t0;
	pid_t pid;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	for (size_t i = 0; i < BLOCK; i += 8) {
		seed = seed * 6364136223846793005ull + 1442695040888963407ull;
		memcpy(base + i, &seed, 8);
	}
	lfd = t_listen(AF_INET, &port);
	pid = fork();
	if (pid == 0)
		_exit(sender(port));
	sfd = accept(lfd, NULL, NULL);
	close(lfd);
	CHECK(t_swapped(sfd), "not on shm");
	t0 = t_ms();
	for (;;) {
		ssize_t r = read(sfd, buf, sizeof(buf));

		if (r <= 0) {
			CHECK(r == 0, "read: %s", strerror(errno));
			break;
		}
		if (!bad && !matches(buf, (size_t)r, got)) {
			CHECK(0, "bytes at offset %llu differ from what was sent", (unsigned long long)got);
			bad = 1;
		}
		got += (uint64_t)r;
	}
	CHECK(got == TOTAL, "got %llu bytes, want %llu", (unsigned long long)got,
	      (unsigned long long)TOTAL);
	t_wait_child(pid, "sender");
	printf("10 GB in %lld ms\n", (long long)(t_ms() - t0));
	close(sfd);
	return t_shim_finish();
}
