/* SPDX-License-Identifier: MIT */
/*
 * Not a test: the measurement behind the shared-memory channel's defaults
 * (lib/README.md, "Shared memory"). `make -C lib measure-shm` runs it for
 * several spin budgets and ring sizes.
 *
 *   measure_shm pingpong <size> <round trips>   one line: RTT median, p99, CPU per round trip
 *   measure_shm stream <write size> <MiB>        one line: GB/s, CPU per GB on both ends
 *
 * FREEFLOW_SHM_SPIN_US (the library) and FF_TEST_SHM_RING (the fake
 * agent) come from the environment; FF_MEASURE_PIN=<cpu>,<cpu> pins the
 * measuring end and the other end. Both ends are separate processes, as
 * in a container pair; the machine's other load shows in the numbers, so
 * compare settings measured in one run.
 */
#include <sched.h>
#include <sys/resource.h>

#include "shimtest.h"

/* Pin this process to the which-th CPU of FF_MEASURE_PIN, if set. */
static void pin(int which)
{
	const char *v = getenv("FF_MEASURE_PIN");
	int cpu[2];
	cpu_set_t set;

	if (!v || sscanf(v, "%d,%d", &cpu[0], &cpu[1]) != 2)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu[which], &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		perror("sched_setaffinity");
}

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
	       ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int full(int fd, void *buf, size_t n, int out)
{
	size_t off = 0;

	while (off < n) {
		ssize_t r = out ? write(fd, (char *)buf + off, n - off)
				: read(fd, (char *)buf + off, n - off);

		if (r <= 0)
			return -1;
		off += (size_t)r;
	}
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The echoing end: its CPU time per round trip comes back in the last message. */
static int echo(uint16_t port, size_t size, long n)
{
	int fd = t_connect(AF_INET, port);
	char *buf = malloc(size);
	double c0 = cpu_s(), c;

	for (long i = 0; i < n; i++)
		if (full(fd, buf, size, 0) || full(fd, buf, size, 1))
			return 1;
	c = cpu_s() - c0;
	if (full(fd, &c, sizeof(c), 1))
		return 1;
	close(fd);
	return 0;
}

static void pingpong(int fd, size_t size, long n)
{
	double *rtt = malloc((size_t)n * sizeof(double)), c0 = cpu_s(), peer;
	char *buf = calloc(1, size);

	for (long i = 0; i < n; i++) {
		double t = now_s();

		if (full(fd, buf, size, 1) || full(fd, buf, size, 0)) {
			printf("pingpong: connection failed\n");
			exit(1);
		}
		rtt[i] = now_s() - t;
	}
	c0 = cpu_s() - c0;
	if (full(fd, &peer, sizeof(peer), 0))
		exit(1);
	qsort(rtt, (size_t)n, sizeof(double), cmp_double);
	printf("pingpong size=%zu rtt_median_us=%.2f rtt_p99_us=%.2f cpu_us_per_rt=%.2f\n", size,
	       rtt[n / 2] * 1e6, rtt[n * 99 / 100] * 1e6, (c0 + peer) / (double)n * 1e6);
}

static int streamer(uint16_t port, size_t size, long mib)
{
	int fd = t_connect(AF_INET, port);
	char *buf = calloc(1, size);
	long long left = mib << 20;
	double c0 = cpu_s(), c;

	while (left > 0) {
		size_t k = (long long)size < left ? size : (size_t)left;

		if (full(fd, buf, k, 1))
			return 1;
		left -= (long long)k;
	}
	c = cpu_s() - c0;
	if (full(fd, &c, sizeof(c), 1))
		return 1;
	close(fd);
	return 0;
}

static void stream(int fd, size_t size, long mib)
{
	char *buf = malloc(size);
	double t = now_s(), c0 = cpu_s(), peer, gb = (double)(mib << 20) / 1e9;
	long long got = 0;
	ssize_t r;

	while (got < (mib << 20) && (r = read(fd, buf, (size_t)((mib << 20) - got) < size ?
					   (size_t)((mib << 20) - got) : size)) > 0)
		got += r;
	t = now_s() - t;
	c0 = cpu_s() - c0;
	if (got != (mib << 20) || full(fd, &peer, sizeof(peer), 0)) {
		printf("stream: got %lld bytes\n", got);
		exit(1);
	}
	printf("stream write=%zu GB/s=%.2f cpu_s_per_GB=%.3f\n", size, gb / t, (c0 + peer) / gb);
}

int main(int argc, char **argv)
{
	uint16_t port;
	int lfd, fd, ping;
	size_t size;
	long n;
	pid_t pid;

	if (argc != 4 || (strcmp(argv[1], "pingpong") && strcmp(argv[1], "stream"))) {
		fprintf(stderr, "usage: %s pingpong <size> <round trips> | stream <write size> <MiB>\n",
			argv[0]);
		return 2;
	}
	t_shim_setup(argv, FA_BROKER);
	ping = !strcmp(argv[1], "pingpong");
	size = strtoul(argv[2], NULL, 0);
	n = strtol(argv[3], NULL, 0);
	lfd = t_listen(AF_INET, &port);
	pid = fork();
	if (pid == 0) {
		pin(1);
		_exit(ping ? echo(port, size, n) : streamer(port, size, n));
	}
	pin(0);
	fd = accept(lfd, NULL, NULL);
	close(lfd);
	if (!t_swapped(fd))
		printf("(not swapped: measuring the overlay)\n");
	if (ping)
		pingpong(fd, size, n);
	else
		stream(fd, size, n);
	close(fd);
	t_wait_child(pid, "the other end");
	return t_shim_finish();
}
