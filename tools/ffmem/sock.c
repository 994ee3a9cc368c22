/* The clients: ping-pong latency, stream bandwidth and idle CPU, over a
 * TCP connection or an AF_UNIX stream socket, through plain libc calls
 * (so a preloaded FreeFlow library sees them as it sees any program's).
 * Each size gets its own connection, as a separate sockperf or iperf3 run
 * would. */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ffmem.h"

#define MAX_SIZES 32

struct client_opts {
	struct ffm_addr addr;
	size_t sizes[MAX_SIZES];
	int n_sizes;
	double secs; /* per size; idle: the idle time */
};

static int connect_unix(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		ffm_fail("socket path too long (%zu bytes, at most %zu): %s", strlen(path), sizeof(sa.sun_path) - 1,
			 path);
	strcpy(sa.sun_path, path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM, 0)) < 0)
		ffm_die("create an AF_UNIX socket");
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		fprintf(stderr, "ffmem: connect to %s: %s (is its server listening there?)\n", path, strerror(errno));
		exit(1);
	}
	return fd;
}

static int connect_tcp(const char *hostport)
{
	char host[256];
	const char *colon = strrchr(hostport, ':');
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
	int fd, one = 1, rc;

	if (!colon || colon == hostport || (size_t)(colon - hostport) >= sizeof(host))
		ffm_fail("--tcp wants HOST:PORT; got %s", hostport);
	memcpy(host, hostport, (size_t)(colon - hostport));
	host[colon - hostport] = '\0';
	if ((rc = getaddrinfo(host, colon + 1, &hints, &ai)) != 0)
		ffm_fail("resolve %s: %s", hostport, gai_strerror(rc));
	if ((fd = socket(ai->ai_family, SOCK_STREAM, 0)) < 0)
		ffm_die("create a TCP socket");
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		fprintf(stderr, "ffmem: connect to %s: %s (is its server running there?)\n", hostport,
			strerror(errno));
		exit(1);
	}
	freeaddrinfo(ai);
	/* Latency is measured message by message, as sockperf does it. */
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		ffm_die("set TCP_NODELAY");
	return fd;
}

int ffm_connect(const struct ffm_addr *a)
{
	return a->path ? connect_unix(a->path) : connect_tcp(a->tcp);
}

/* hello connects and announces mode with arg. */
static int hello(const struct client_opts *o, uint32_t mode, uint64_t arg)
{
	struct ffm_hello h = {.magic = "FFM1", .mode = mode, .arg = arg};
	int fd = ffm_connect(&o->addr), rc;

	if ((rc = ffm_write_full(fd, &h, sizeof(h))) < 0) {
		errno = -rc;
		ffm_die("send the hello");
	}
	return fd;
}

static void client_args(int argc, char **argv, struct client_opts *o, double secs, int need_sizes)
{
	static const struct option opts[] = {
		{"tcp", required_argument, NULL, 't'},	 {"unix", required_argument, NULL, 'u'},
		{"sizes", required_argument, NULL, 's'}, {"ms", required_argument, NULL, 'm'},
		{"seconds", required_argument, NULL, 'S'}, {NULL, 0, NULL, 0},
	};
	int c;

	*o = (struct client_opts){.secs = secs};
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 't':
			o->addr.tcp = optarg;
			break;
		case 'u':
			o->addr.path = optarg;
			break;
		case 's':
			if ((o->n_sizes = ffm_parse_sizes(optarg, o->sizes, MAX_SIZES)) <= 0)
				ffm_fail("--sizes wants sizes in bytes, e.g. 1,1024,1048576; got %s", optarg);
			break;
		case 'm':
		case 'S':
			o->secs = atof(optarg) / (c == 'm' ? 1000 : 1);
			if (o->secs <= 0 || o->secs > 3600)
				ffm_fail("--%s out of range: %s", c == 'm' ? "ms" : "seconds", optarg);
			break;
		default:
			ffm_fail("%s: unknown option (see ffmem without arguments)", argv[0]);
		}
	}
	if (optind != argc)
		ffm_fail("%s: unexpected argument %s", argv[0], argv[optind]);
	if (!o->addr.tcp == !o->addr.path)
		ffm_fail("%s: give exactly one of --tcp HOST:PORT and --unix PATH", argv[0]);
	if (need_sizes && o->n_sizes == 0)
		ffm_fail("%s: --sizes is required", argv[0]);
}

/* ---- ping-pong ---- */

/* round_trip sends size bytes and reads them back; the round trip in s. */
static double round_trip(int fd, unsigned char *buf, size_t size)
{
	double t0 = ffm_now();
	int rc;

	if ((rc = ffm_write_full(fd, buf, size)) < 0 || (rc = ffm_read_full(fd, buf, size)) <= 0) {
		errno = rc == 0 ? EPIPE : -rc;
		ffm_die("ping-pong with the server");
	}
	return ffm_now() - t0;
}

static void pingpong_size(const struct client_opts *o, size_t size)
{
	/* At least this many round trips, unless that takes 3 times the
	 * planned time (1 MiB over a slow overlay): a p99 needs a few. */
	enum { MIN_TRIPS = 200, CAP = 1 << 22 };
	unsigned char *buf = ffm_alloc(size);
	double *us = malloc(CAP * sizeof(*us)), start, sum = 0;
	size_t n = 0;
	int fd = hello(o, FFM_PINGPONG, size);

	if (!us)
		ffm_fail("allocate the sample table: out of memory");
	/* Warm up: connection, caches, the peer's wake-up path, a tenth of
	 * the time (sockperf discards its first 400 ms for the same). */
	for (start = ffm_now(); ffm_now() - start < o->secs / 10;)
		round_trip(fd, buf, size);
	for (start = ffm_now(); n < CAP;) {
		double el = ffm_now() - start;

		if ((el >= o->secs && n >= MIN_TRIPS) || (el >= 3 * o->secs && n > 0))
			break;
		us[n] = round_trip(fd, buf, size) / 2 * 1e6;
		sum += us[n++];
	}
	close(fd);
	qsort(us, n, sizeof(*us), ffm_cmp_double);
	printf("pingpong size=%zu round_trips=%zu p50_us=%.3f p99_us=%.3f avg_us=%.3f min_us=%.3f max_us=%.3f\n", size, n,
	       ffm_percentile(us, n, 50), ffm_percentile(us, n, 99), sum / (double)n, us[0], us[n - 1]);
	fflush(stdout);
	free(us);
	free(buf);
}

int ffm_pingpong(int argc, char **argv)
{
	struct client_opts o;

	client_args(argc, argv, &o, 0.25, 1);
	for (int i = 0; i < o.n_sizes; i++)
		pingpong_size(&o, o.sizes[i]);
	return 0;
}

/* ---- stream ---- */

static void read_report(int fd, struct ffm_report *r)
{
	int rc = ffm_read_full(fd, r, sizeof(*r));

	if (rc <= 0) {
		errno = rc == 0 ? EPIPE : -rc;
		ffm_die("read the server's report");
	}
}

static void stream_size(const struct client_opts *o, size_t size)
{
	unsigned char *buf = ffm_alloc(size);
	struct ffm_report r;
	double start, el, cpu0;
	int fd = hello(o, FFM_STREAM, size), rc;

	cpu0 = ffm_cpu();
	start = ffm_now();
	while (ffm_now() - start < o->secs) {
		if ((rc = ffm_write_full(fd, buf, size)) < 0) {
			errno = -rc;
			ffm_die("stream to the server");
		}
	}
	if (shutdown(fd, SHUT_WR) < 0)
		ffm_die("shut the stream down");
	/* The server reports after it read the last byte: the rate is what
	 * it received, over the whole time it took. */
	read_report(fd, &r);
	el = ffm_now() - start;
	close(fd);
	printf("stream size=%zu bytes=%llu seconds=%.3f gbit_s=%.3f client_cpu_s=%.4f server_cpu_s=%.4f\n", size,
	       (unsigned long long)r.bytes, el, (double)r.bytes * 8 / el / 1e9, ffm_cpu() - cpu0, r.cpu_s);
	fflush(stdout);
	free(buf);
}

int ffm_stream(int argc, char **argv)
{
	struct client_opts o;

	client_args(argc, argv, &o, 0.5, 1);
	for (int i = 0; i < o.n_sizes; i++)
		stream_size(&o, o.sizes[i]);
	return 0;
}

/* ---- idle ---- */

/* An open connection nobody uses: the client waits in poll() for a reply
 * that does not come (an event loop's idle state), the server is blocked
 * in read() for the next request. Both processes' CPU over that time is
 * what an idle connection costs; 0 unless something spins. */
int ffm_idle(int argc, char **argv)
{
	struct client_opts o;
	struct ffm_report r;
	struct pollfd p;
	double cpu, t0, idle_s;
	int fd, rc;

	client_args(argc, argv, &o, 10, 0);
	fd = hello(&o, FFM_IDLE, 0);
	cpu = ffm_cpu();
	t0 = ffm_now();
	p = (struct pollfd){.fd = fd, .events = POLLIN};
	for (;;) {
		int left = (int)((o.secs - (ffm_now() - t0)) * 1000);

		if (left <= 0 || (rc = poll(&p, 1, left)) == 0)
			break;
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc < 0)
			ffm_die("wait on the idle connection");
		ffm_fail("the server sent data on an idle connection (revents %#x)", p.revents);
	}
	cpu = ffm_cpu() - cpu;
	idle_s = ffm_now() - t0;
	if ((rc = ffm_write_full(fd, "x", 1)) < 0) {
		errno = -rc;
		ffm_die("end the idle time");
	}
	read_report(fd, &r);
	close(fd);
	printf("idle seconds=%.2f client_cpu_ms=%.3f server_cpu_ms=%.3f\n", idle_s, cpu * 1e3, r.cpu_s * 1e3);
	return 0;
}
