/* SPDX-License-Identifier: MIT */
/*
 * Copying into and out of a ring (docs/SHM.md, "Copying").
 *
 * glibc's memcpy copies 2 KiB to 512 KiB with `rep movsb` on CPUs that
 * advertise fast string moves. On AMD that ran 4 to 5 times slower than a
 * loop of vector moves on ring data (EPYC, glibc 2.36: a 1 MiB stream at
 * 2.4 against 11 GB/s; glibc bug 30994: `rep movsb` is slow there when
 * source and destination sit at nearly the same offset in their pages, as
 * a ring's and a program's page-aligned buffers do). On Intel `rep movsb`
 * is the faster one (Xeon: 1.2-1.6 times the loop's streams). So the loop
 * runs on AMD (and Hygon, the same cores) with AVX2, memcpy elsewhere.
 */
#include <stdint.h>
#include <string.h>

#include "shm/shm.h"

/* Below this, memcpy's own short-copy paths are as fast and need no set-up. */
#define LOOP_MIN	256

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

#define LOAD(p)		_mm256_loadu_si256((const __m256i *)(const void *)(p))

/*
 * Four 32-byte moves per step, the stores aligned; the first and the last
 * 128 bytes by unaligned moves that may overlap the steps' (n >= LOOP_MIN).
 */
__attribute__((target("avx2"))) void ff_shm_copy_avx2(uint8_t *d, const uint8_t *s, size_t n)
{
	uint8_t *end = d + n;
	const uint8_t *send = s + n;
	size_t head = 32 - ((uintptr_t)d & 31);
	__m256i t0 = LOAD(send - 128), t1 = LOAD(send - 96), t2 = LOAD(send - 64), t3 = LOAD(send - 32);

	_mm256_storeu_si256((__m256i *)(void *)d, LOAD(s));
	d += head;
	s += head;
	n -= head;
	for (; n > 128; d += 128, s += 128, n -= 128) {
		__m256i a = LOAD(s), b = LOAD(s + 32), c = LOAD(s + 64), e = LOAD(s + 96);

		_mm256_store_si256((__m256i *)(void *)d, a);
		_mm256_store_si256((__m256i *)(void *)(d + 32), b);
		_mm256_store_si256((__m256i *)(void *)(d + 64), c);
		_mm256_store_si256((__m256i *)(void *)(d + 96), e);
	}
	_mm256_storeu_si256((__m256i *)(void *)(end - 128), t0);
	_mm256_storeu_si256((__m256i *)(void *)(end - 96), t1);
	_mm256_storeu_si256((__m256i *)(void *)(end - 64), t2);
	_mm256_storeu_si256((__m256i *)(void *)(end - 32), t3);
}

int ff_shm_copy_has_avx2(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx2");
}

/* An AMD or Hygon CPU, by the vendor string of CPUID leaf 0. */
static int amd_cores(void)
{
	unsigned int a, b, c, d;

	if (!__get_cpuid(0, &a, &b, &c, &d))
		return 0;
	return (b == 0x68747541 && d == 0x69746e65 && c == 0x444d4163) ||	/* AuthenticAMD */
	       (b == 0x6f677948 && d == 0x6e65476e && c == 0x656e6975);		/* HygonGenuine */
}

static int use_loop(void)
{
	static _Atomic int known;	/* 0: not asked yet; 1: no; 2: yes */
	int k = atomic_load_explicit(&known, memory_order_relaxed);

	if (!k) {
		k = amd_cores() && ff_shm_copy_has_avx2() ? 2 : 1;
		atomic_store_explicit(&known, k, memory_order_relaxed);
	}
	return k == 2;
}

void ff_shm_copy(void *dst, const void *src, size_t n)
{
	if (n >= LOOP_MIN && use_loop())
		ff_shm_copy_avx2(dst, src, n);
	else
		memcpy(dst, src, n);
}
#else
void ff_shm_copy(void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
}
#endif
