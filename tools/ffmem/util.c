/* Helpers shared by every mode: errors, clocks, size lists, pinning,
 * full reads and writes, percentiles. */
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ffmem.h"

void ffm_die(const char *what)
{
	fprintf(stderr, "ffmem: %s: %s\n", what, strerror(errno));
	exit(1);
}

void ffm_fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("ffmem: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

double ffm_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The process's CPU time (all threads, user and system): the kernel's
 * per-process accounting behind /proc/PID/stat's utime and stime, read
 * with nanosecond rather than clock-tick resolution. */
double ffm_cpu(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ffm_parse_sizes reads "1,64,1024" into out; each size is 1 B to 1 GiB.
 * It returns how many, or -1 on bad input. */
int ffm_parse_sizes(const char *s, size_t *out, int max)
{
	int n = 0;

	while (*s) {
		char *end;
		unsigned long long v;

		errno = 0;
		v = strtoull(s, &end, 10);
		if (errno || end == s || v == 0 || v > (1ull << 30) || n == max ||
		    (*end != ',' && *end != '\0'))
			return -1;
		out[n++] = (size_t)v;
		s = *end == ',' ? end + 1 : end;
	}
	return n;
}

/* ffm_pin binds the calling thread to one CPU: a ping-pong or ring whose
 * ends the scheduler moves around measures the scheduler. */
void ffm_pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0)
		ffm_die("pin to CPU (sched_setaffinity)");
}

/* ffm_write_full writes all n bytes; 0 or -errno. */
int ffm_write_full(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n > 0) {
		ssize_t w = write(fd, p, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* ffm_read_full reads exactly n bytes: 1 when done, 0 on EOF before the
 * first byte, -EPIPE on EOF after it, -errno on error. */
int ffm_read_full(int fd, void *buf, size_t n)
{
	char *p = buf;
	size_t got = 0;

	while (got < n) {
		ssize_t r = read(fd, p + got, n - got);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return got == 0 ? 0 : -EPIPE;
		got += (size_t)r;
	}
	return 1;
}

/* ffm_alloc returns n bytes aligned to a page, touched, so page faults do
 * not land inside a measurement. */
void *ffm_alloc(size_t n)
{
	void *p;

	if (posix_memalign(&p, 4096, n) != 0)
		ffm_fail("allocate %zu bytes: out of memory", n);
	memset(p, 0x5a, n);
	return p;
}

int ffm_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* ffm_percentile is the nearest-rank percentile p (0-100) of n sorted
 * values, as sockperf reports them. */
double ffm_percentile(const double *sorted, size_t n, double p)
{
	size_t i;

	if (n == 0)
		return 0;
	i = (size_t)(p / 100.0 * (double)n + 0.999999);
	if (i > 0)
		i--;
	if (i >= n)
		i = n - 1;
	return sorted[i];
}
