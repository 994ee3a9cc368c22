/* SPDX-License-Identifier: MIT */
/*
 * Shared by the tests: failure reporting that keeps going, so one run shows
 * every broken case, and hex helpers for protocol bytes.
 */
#ifndef FREEFLOW_TESTUTIL_H
#define FREEFLOW_TESTUTIL_H

#include <stdio.h>
#include <stdint.h>
#include <string.h>

#define T_EXIT_PASS	0
#define T_EXIT_FAIL	1
#define T_EXIT_SKIP	77

static int t_failures;

#define CHECK(cond, ...) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "%s:%d: check failed: %s: ",		\
			__FILE__, __LINE__, #cond);			\
		fprintf(stderr, __VA_ARGS__);				\
		fputc('\n', stderr);					\
		t_failures++;						\
	}								\
} while (0)

static inline int t_exit_code(void)
{
	return t_failures ? T_EXIT_FAIL : T_EXIT_PASS;
}

static inline int t_hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* Lowercase hex only, as the vectors file writes it. Returns bytes or -1. */
static inline long t_unhex(const char *s, size_t n, uint8_t *out, size_t cap)
{
	if (n % 2 || n / 2 > cap)
		return -1;
	for (size_t i = 0; i < n; i += 2) {
		int hi = t_hexval(s[i]), lo = t_hexval(s[i + 1]);

		if (hi < 0 || lo < 0)
			return -1;
		out[i / 2] = (uint8_t)(hi << 4 | lo);
	}
	return (long)(n / 2);
}

/* Append the lowercase hex of buf to out (which must have room). */
static inline char *t_hex(char *out, const uint8_t *buf, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out += sprintf(out, "%02x", buf[i]);
	*out = '\0';
	return out;
}

#endif
