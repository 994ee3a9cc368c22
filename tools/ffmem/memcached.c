/* A memcached client that times every request: the memcached experiment's
 * tail, which memaslap does not give (it prints a log2 histogram). One
 * thread, N connections with one request outstanding each (memaslap
 * -T 1 -c N's shape), 90% get / 10% set over KEYS keys with values of
 * --value bytes, in memcached's text protocol; a request's latency runs
 * from its write to the last byte of its answer. Every answer is checked:
 * a get returns the value set (or counts as a miss), a set is STORED. */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ffmem.h"

#define KEYS 1000       /* 1 MiB of 1 KiB values: far from memcached's -m 64, never evicted */
#define MAX_CONNS 256   /* the pollfd array; memaslap's runs use tens */
#define MAX_VALUE 65536 /* one answer fits the connection's buffer */
#define WAIT_MS 5000    /* no answer for this long: the server is stuck */
#define CAP (1 << 23)   /* latencies kept: a p99 needs far fewer */

struct mc_conn {
	int fd;
	int get;      /* the outstanding request is a get */
	unsigned key; /* of the outstanding request */
	double t0;   /* when it was written */
	size_t have; /* answer bytes read so far */
	size_t want; /* the whole answer's bytes, once its first line is in (else 0) */
	char buf[MAX_VALUE + 512];
};

static uint64_t rng = 88172645463325252ull;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Write a set of key to value, or a get of key, on c (blocking until written), and start its clock. */
static void request(struct mc_conn *c, int get, unsigned key, const char *value, size_t vlen)
{
	static char req[128 + MAX_VALUE];
	int n, rc;

	if (get) {
		n = snprintf(req, sizeof(req), "get ffkey%04u\r\n", key);
	} else {
		n = snprintf(req, sizeof(req), "set ffkey%04u 0 0 %zu\r\n", key, vlen);
		memcpy(req + n, value, vlen);
		memcpy(req + n + vlen, "\r\n", 2);
		n += (int)vlen + 2;
	}
	c->get = get;
	c->key = key;
	c->have = c->want = 0;
	c->t0 = ffm_now();
	if ((rc = ffm_write_full(c->fd, req, (size_t)n)) < 0) {
		errno = -rc;
		ffm_die("send a request to memcached");
	}
}

/* The whole answer's bytes from its first line (line bytes with CRLF); exits on an answer that is none. */
static size_t answer_len(const struct mc_conn *c, size_t line)
{
	char first[128];
	unsigned long bytes;
	char *end;

	if (line - 2 >= sizeof(first))
		ffm_fail("memcached answered a line of %zu bytes to a %s", line - 2, c->get ? "get" : "set");
	memcpy(first, c->buf, line - 2);
	first[line - 2] = '\0';
	if (!c->get && !strcmp(first, "STORED"))
		return line;
	if (c->get && !strcmp(first, "END"))
		return line;
	/* VALUE <key> <flags> <bytes> */
	if (c->get && !strncmp(first, "VALUE ", 6) && (end = strrchr(first, ' ')) && end > first + 6) {
		bytes = strtoul(end + 1, &end, 10);
		if (!*end && bytes <= MAX_VALUE)
			return line + bytes + 2 + 5; /* data, CRLF, END CRLF */
	}
	ffm_fail("memcached answered \"%s\" to a %s", first, c->get ? "get" : "set");
}

/* c's answer, complete: whether it was a hit (a get that found value); exits on a wrong one. */
static int check_answer(const struct mc_conn *c, const char *value, size_t vlen)
{
	const char *eol = memchr(c->buf, '\n', c->have);
	size_t line = (size_t)(eol - c->buf) + 1, got = c->want - line - 7;
	char head[32];
	int n;

	if (!c->get || c->want == line)
		return 0;
	n = snprintf(head, sizeof(head), "VALUE ffkey%04u ", c->key);
	if (strncmp(c->buf, head, (size_t)n))
		ffm_fail("memcached answered a get of ffkey%04u with another key's value", c->key);
	if (got != vlen || memcmp(c->buf + line, value, vlen) || memcmp(c->buf + c->want - 7, "\r\nEND\r\n", 7))
		ffm_fail("memcached returned a value other than the one set (%zu bytes; %zu set)", got, vlen);
	return 1;
}

/*
 * Read what c has, waiting at most WAIT_MS for it unless polled (the
 * caller's poll said it is readable); whether its answer is complete.
 */
static int read_answer(struct mc_conn *c, int polled)
{
	struct pollfd p = {.fd = c->fd, .events = POLLIN};
	const char *eol;
	ssize_t n = 1;

	if (c->have == sizeof(c->buf))
		ffm_fail("memcached answered more than %zu bytes to one request", sizeof(c->buf));
	if (!polled && (n = poll(&p, 1, WAIT_MS)) == 0)
		ffm_fail("no answer from memcached within %d ms", WAIT_MS);
	if (n > 0)
		n = read(c->fd, c->buf + c->have, sizeof(c->buf) - c->have);
	if (n <= 0) {
		if (n < 0 && errno == EINTR)
			return 0;
		if (n == 0)
			ffm_fail("memcached closed a connection (is it still running?)");
		ffm_die("read memcached's answer");
	}
	c->have += (size_t)n;
	if (!c->want && (eol = memchr(c->buf, '\n', c->have))) {
		if (eol == c->buf || eol[-1] != '\r')
			ffm_fail("memcached answered a line not ended by CRLF");
		c->want = answer_len(c, (size_t)(eol - c->buf) + 1);
	}
	if (c->want && c->have > c->want)
		ffm_fail("memcached sent %zu bytes more than its answer", c->have - c->want);
	return c->want && c->have == c->want;
}

/* c's answer came: checked, and timed if its request was sent within the measured time. */
static void record(const struct mc_conn *c, double start, double *us, size_t *n, size_t *misses, const char *value,
		   size_t vlen)
{
	double t = ffm_now();
	int hit = check_answer(c, value, vlen);

	if (start && c->t0 >= start && *n < CAP) {
		us[(*n)++] = (t - c->t0) * 1e6;
		*misses += c->get && !hit;
	}
}

static void options(int argc, char **argv, struct ffm_addr *a, int *conns, double *secs, size_t *vlen)
{
	static const struct option opts[] = {
		{"tcp", required_argument, NULL, 't'},	   {"unix", required_argument, NULL, 'u'},
		{"conns", required_argument, NULL, 'c'},   {"seconds", required_argument, NULL, 's'},
		{"value", required_argument, NULL, 'v'},   {NULL, 0, NULL, 0},
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
			if (*vlen < 1 || *vlen > MAX_VALUE)
				ffm_fail("--value wants 1 to %d bytes; got %s", MAX_VALUE, optarg);
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
	double secs = 1, *us, start = 0, warm, end;
	size_t vlen = 1024, n = 0, misses = 0, done;
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
		request(&c[0], 0, k, value, vlen);
		while (!read_answer(&c[0], 0))
			;
	}
	for (int i = 0; i < conns; i++)
		request(&c[i], next_rand() % 10 != 0, (unsigned)(next_rand() % KEYS), value, vlen);
	/* A tenth of the time warms up (as pingpong does), then every answer counts. */
	warm = ffm_now() + secs / 10;
	for (;;) {
		double now = ffm_now();
		int r;

		if (!start && now >= warm)
			start = now;
		if (start && (now - start >= secs || n == CAP))
			break;
		r = poll(p, (nfds_t)conns, WAIT_MS);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			ffm_die("poll the connections to memcached");
		if (r == 0)
			ffm_fail("no answer from memcached within %d ms", WAIT_MS);
		for (int i = 0; i < conns; i++) {
			if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) {
				/* The others answering does not hide one that stopped. */
				if (now - c[i].t0 > WAIT_MS / 1e3)
					ffm_fail("no answer from memcached on connection %d within %d ms", i, WAIT_MS);
				continue;
			}
			if (!read_answer(&c[i], 1))
				continue;
			record(&c[i], start, us, &n, &misses, value, vlen);
			request(&c[i], next_rand() % 10 != 0, (unsigned)(next_rand() % KEYS), value, vlen);
		}
	}
	end = ffm_now();
	done = n;
	/* The requests still out count too: the slowest may be among them. */
	for (int i = 0; i < conns; i++) {
		while (!read_answer(&c[i], 0))
			;
		record(&c[i], start, us, &n, &misses, value, vlen);
	}
	if (!n)
		ffm_fail("no request answered within %.1f s", secs);
	qsort(us, n, sizeof(*us), ffm_cmp_double);
	printf("memcached conns=%d requests=%zu misses=%zu ops_s=%.0f p50_us=%.3f p99_us=%.3f p999_us=%.3f "
	       "max_us=%.3f\n",
	       conns, n, misses, (double)done / (end - start), ffm_percentile(us, n, 50), ffm_percentile(us, n, 99),
	       ffm_percentile(us, n, 99.9), us[n - 1]);
	for (int i = 0; i < conns; i++)
		close(c[i].fd);
	free(value);
	free(c);
	free(us);
	return 0;
}
