/* SPDX-License-Identifier: MIT */
/* Description: the ring copy (shm/copy.c: memcpy, or on AMD its own vector loop instead of memcpy's rep movsb) copies exactly n bytes for every size from 0 to 4 KiB and random sizes up to 3 MiB, at every source and destination alignment within a cache line: the bytes equal the source, and not one byte before or after the destination changes; the vector loop is checked the same way on every CPU with AVX2, whichever copy this CPU uses */
#include <stdint.h>

#include "shm/shm.h"
#include "testutil.h"

#define MAX	(3u << 20)
#define GUARD	64

static uint8_t *src, *dst;
static const char *which;
static int loop;	/* check ff_shm_copy_avx2 instead of ff_shm_copy */

/* Copy n bytes from src+so to dst+GUARD+dof and check the destination and its guards. */
static void one(size_t n, size_t so, size_t dof)
{
	uint8_t *d = dst + GUARD + dof;

	if (loop && n < 256)
		return;	/* the loop's smallest copy */
	memset(dst, 0xA5, GUARD + dof + n + GUARD);
#if defined(__x86_64__)
	if (loop)
		ff_shm_copy_avx2(d, src + so, n);
	else
#endif
		ff_shm_copy(d, src + so, n);
	CHECK(!memcmp(d, src + so, n), "%s, size %zu, offsets %zu/%zu: bytes differ", which, n, so, dof);
	for (size_t i = 0; i < GUARD + dof; i++)
		if (dst[i] != 0xA5) {
			CHECK(0, "%s, size %zu, offsets %zu/%zu: byte %zu before the destination written",
			      which, n, so, dof, GUARD + dof - i);
			break;
		}
	for (size_t i = 0; i < GUARD; i++)
		if (d[n + i] != 0xA5) {
			CHECK(0, "%s, size %zu, offsets %zu/%zu: byte %zu past the end written", which, n, so,
			      dof, i);
			break;
		}
}

/* Every size to 4 KiB, every alignment pair, and 200 random sizes to 3 MiB. */
static void sweep(void)
{
	uint64_t x = 88172645463325252ull;

	for (size_t n = 0; n <= 4096; n++)
		one(n, n % 64, (n / 64) % 64);
	for (size_t so = 0; so < 64; so++)
		for (size_t dof = 0; dof < 64; dof++)
			one(300 + so * 7 + dof, so, dof);
	for (int i = 0; i < 200 && !t_failures; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;	/* xorshift: the same sizes every run */
		one((size_t)(x % (MAX - 64)), (size_t)(x >> 40) % 64, (size_t)(x >> 50) % 64);
	}
}

int main(void)
{
	src = malloc(MAX + 2 * GUARD);
	dst = malloc(MAX + 4 * GUARD);
	if (!src || !dst)
		return T_EXIT_FAIL;
	for (size_t i = 0; i < MAX + 2 * GUARD; i++)
		src[i] = (uint8_t)(i * 131 + (i >> 9));
	which = "ff_shm_copy";
	sweep();
#if defined(__x86_64__)
	if (ff_shm_copy_has_avx2()) {
		which = "the AVX2 loop";
		loop = 1;
		sweep();
	}
#endif
	return t_exit_code();
}
