/* A memcached client that times every request: the memcached experiment's
 * tail, which memaslap does not give (it prints a log2 histogram). One
 * thread, N connections with one request outstanding each (memaslap
 * -T 1 -c N's shape), 90% get / 10% set over KEYS keys with values of
 * --value bytes, in memcached's text protocol; a request's latency runs
 * from its write to the last byte of its answer. */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ffmem.h"

#define KEYS 1000
#define MAX_CONNS 256
#define CAP (1 << 23) /* latencies kept: a p99 needs far fewer */

struct mc_conn {
	int fd;
	int get;      /* the outstanding request is a get */
	double t0;    /* when it was written */
	size_t have;  /* answer bytes read so far */
	char buf[65536 + 512];
};

static uint64_t rng = 88172645463325252ull;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Write request req of n bytes on c, blocking until it is all written. */
static void send_req(struct mc_conn *c, const char *req, size_t n)
{
	int rc = ffm_write_full(c->fd, req, n);

	if (rc < 0) {
		errno = -rc;
		ffm_die("send a request to memcached");
	}
}

/* Start a request on c: a get of a random key, or one in ten a set of value. */
static void request(struct mc_conn *c, const char *value, size_t vlen)
{
	char req[128 + 65536];
	unsigned key = (unsigned)(next_rand() % KEYS);
	int n;

	c->get = next_rand() % 10 != 0;
	if (c->get)
		n = snprintf(req, sizeof(req), "get ffkey%04u\r\n", key);
	else {
		n = snprintf(req, sizeof(req), "set ffkey%04u 0 0 %zu\r\n", key, vlen);
		memcpy(req + n, value, vlen);
		memcpy(req + n + vlen, "\r\n", 2);
		n += (int)vlen + 2;
	}
	c->have = 0;
	c->t0 = ffm_now();
	send_req(c, req, (size_t)n);
}

/* Bytes of c's whole answer once its first line is in, 0 before; exits on an error answer. */
static size_t answer_len(const struct mc_conn *c)
{
	const char *eol = memmem(c->buf, c->have, "\r\n", 2);
	size_t line, bytes;

	if (!eol)
		return 0;
	line = (size_t)(eol - c->buf) + 2;
	if (!c->get && line == 8 && !memcmp(c->buf, "STORED", 6))
		return line;
	if (c->get && line == 5 && !memcmp(c->buf, "END", 3))
		return line;
	if (c->get && sscanf(c->buf, "VALUE %*s %*u %zu", &bytes) == 1 && bytes <= 65536)
		return line + bytes + 2 + 5; /* data, CRLF, END CRLF */
	ffm_fail("memcached answered %.*s to a %s", (int)(line - 2), c->buf, c->get ? "get" : "set");
}

/* Read what c has; whether its answer is complete. */
static int read_answer(struct mc_conn *c)
{
	ssize_t n = read(c->fd, c->buf + c->have, sizeof(c->buf) - c->have);
	size_t want;

	if (n <= 0) {
		if (n < 0 && errno == EINTR)
			return 0;
		if (n == 0)
			ffm_fail("memcached closed a connection (is it still running?)");
		ffm_die("read memcached's answer");
	}
	c->have += (size_t)n;
	want = answer_len(c);
	if (want && c->have > want)
		ffm_fail("memcached sent %zu bytes more than its answer", c->have - want);
	return want && c->have == want;
}

static void options(int argc, char **argv, struct ffm_addr *a, int *conns, double *secs, size_t *vlen)
{
	static const struct option opts[] = {
		{"tcp", required_argument, NULL, 't'},	   {"unix", required_argument, NULL, 'u'},
		{"conns", required_argument, NULL, 'c'},
		{"seconds", required_argument, NULL, 's'}, {"value", required_argument, NULL, 'v'},
		{NULL, 0, NULL, 0},
	};
	int o;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 't':
			a->tcp = optarg;
			break;
		case 'u':
			a->path = optarg;
			break;
		case 'c':
			*conns = atoi(optarg);
			if (*conns < 1 || *conns > MAX_CONNS)
				ffm_fail("--conns wants 1 to %d; got %s", MAX_CONNS, optarg);
			break;
		case 's':
			*secs = atof(optarg);
			if (*secs <= 0 || *secs > 3600)
				ffm_fail("--seconds out of range: %s", optarg);
			break;
		case 'v':
			*vlen = (size_t)atol(optarg);
			if (*vlen < 1 || *vlen > 65536)
				ffm_fail("--value wants 1 to 65536 bytes; got %s", optarg);
			break;
		default:
			ffm_fail("memcached: unknown option (see ffmem without arguments)");
		}
	}
	if (optind != argc)
		ffm_fail("memcached: unexpected argument %s", argv[optind]);
	if (!a->tcp == !a->path)
		ffm_fail("memcached: give exactly one of --tcp HOST:PORT and --unix PATH");
}

int ffm_memcached(int argc, char **argv)
{
	struct ffm_addr addr = {0};
	int conns = 16;
	double secs = 1, *us, start, warm;
	size_t vlen = 1024, n = 0;
	struct mc_conn *c;
	struct pollfd p[MAX_CONNS];
	char *value;

	options(argc, argv, &addr, &conns, &secs, &vlen);
	c = ffm_alloc((size_t)conns * sizeof(*c));
	us = malloc(CAP * sizeof(*us));
	value = ffm_alloc(vlen);
	if (!us)
		ffm_fail("allocate the sample table: out of memory");
	memset(value, 'v', vlen);
	for (int i = 0; i < conns; i++) {
		c[i].fd = ffm_connect(&addr);
		p[i] = (struct pollfd){.fd = c[i].fd, .events = POLLIN};
	}
	/* Every key set first, so that gets find their values. */
	for (unsigned k = 0; k < KEYS; k++) {
		char req[128];
		int len = snprintf(req, sizeof(req), "set ffkey%04u 0 0 %zu\r\n", k, vlen);

		c[0].get = 0;
		c[0].have = 0;
		send_req(&c[0], req, (size_t)len);
		send_req(&c[0], value, vlen);
		send_req(&c[0], "\r\n", 2);
		while (!read_answer(&c[0]))
			;
	}
	for (int i = 0; i < conns; i++)
		request(&c[i], value, vlen);
	/* A tenth of the time warms up (as pingpong does), then every answer counts. */
	warm = ffm_now() + secs / 10;
	start = 0;
	for (;;) {
		double now = ffm_now();

		if (!start && now >= warm)
			start = now;
		if (start && (now - start >= secs || n == CAP))
			break;
		int r = poll(p, (nfds_t)conns, 5000);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			ffm_die("poll the connections to memcached");
		if (r == 0)
			ffm_fail("no answer from memcached within 5 s");
		for (int i = 0; i < conns; i++) {
			if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)) || !read_answer(&c[i]))
				continue;
			if (start && c[i].t0 >= start && n < CAP)
				us[n++] = (ffm_now() - c[i].t0) * 1e6;
			request(&c[i], value, vlen);
		}
	}
	if (!n)
		ffm_fail("no request answered within %.1f s", secs);
	qsort(us, n, sizeof(*us), ffm_cmp_double);
	printf("memcached conns=%d requests=%zu ops_s=%.0f p50_us=%.3f p99_us=%.3f p999_us=%.3f max_us=%.3f\n", conns, n,
	       (double)n / (ffm_now() - start), ffm_percentile(us, n, 50), ffm_percentile(us, n, 99),
	       ffm_percentile(us, n, 99.9), us[n - 1]);
	for (int i = 0; i < conns; i++)
		close(c[i].fd);
	free(value);
	free(c);
	free(us);
	return 0;
}
