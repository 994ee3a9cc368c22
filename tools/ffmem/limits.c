/* The physical limits no network path can beat, measured on this machine:
 *
 * - cache-line ping-pong: two threads on two CPUs hand one cache line back
 *   and forth; its round trip is the floor of any shared-memory wake-up
 *   that spins (the other end polls, nobody sleeps);
 * - memcpy bandwidth at sizes that live in L1, L2, L3 and DRAM: every
 *   byte a socket moves is copied at least once, at most this fast;
 * - a two-copy shared-memory ring between two processes: the writer copies
 *   its buffer into a ring both map, the reader copies it out, each end
 *   spinning on the other's index. That is what a shared-memory channel
 *   under a socket API must do at least (two copies, a shared index), so
 *   its bandwidth is the ceiling of such a channel.
 */
#include <getopt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ffmem.h"

#define MAX_SIZES 16

struct limits_opts {
	int cpu[2];
	double secs; /* per measurement */
	size_t memcpy_sizes[MAX_SIZES], ring_sizes[MAX_SIZES];
	int n_memcpy, n_ring;
	size_t ring; /* bytes of the ring's data area */
};

/* ---- cache-line ping-pong ---- */

#define PP_BATCH 1000
#define PP_STOP UINT32_MAX

/* The line itself, alone on its 64 bytes. The pinger writes odd values,
 * the ponger answers with the next even one. */
static struct {
	_Alignas(64) _Atomic uint32_t v;
} pp_line;

static void *ponger(void *arg)
{
	uint32_t want = 1;

	ffm_pin(*(int *)arg);
	for (;;) {
		uint32_t x = atomic_load_explicit(&pp_line.v, memory_order_acquire);

		if (x == PP_STOP)
			return NULL;
		if (x == want) {
			atomic_store_explicit(&pp_line.v, want + 1, memory_order_release);
			want += 2;
		}
	}
}

/* pp_batch makes PP_BATCH round trips from value *next on and returns
 * their mean in ns. */
static double pp_batch(uint32_t *next)
{
	double t0 = ffm_now();

	for (int i = 0; i < PP_BATCH; i++) {
		atomic_store_explicit(&pp_line.v, *next, memory_order_release);
		while (atomic_load_explicit(&pp_line.v, memory_order_acquire) != *next + 1)
			;
		*next += 2;
	}
	return (ffm_now() - t0) * 1e9 / PP_BATCH;
}

static void cacheline(const struct limits_opts *o)
{
	pthread_t th;
	uint32_t next = 1;
	size_t n = 0, cap = 1 << 16;
	double *batch = malloc(cap * sizeof(*batch)), end;
	int cpu = o->cpu[1];

	if (!batch)
		ffm_fail("allocate the batch table: out of memory");
	if (pthread_create(&th, NULL, ponger, &cpu) != 0)
		ffm_fail("start the ponger thread");
	ffm_pin(o->cpu[0]);
	for (int i = 0; i < 10; i++) /* warm up: both ends on their CPU, line hot */
		pp_batch(&next);
	for (end = ffm_now() + o->secs; ffm_now() < end && n < cap;)
		batch[n++] = pp_batch(&next);
	atomic_store_explicit(&pp_line.v, PP_STOP, memory_order_release);
	pthread_join(th, NULL);
	qsort(batch, n, sizeof(*batch), ffm_cmp_double);
	/* The median batch: a batch in which the scheduler ran something
	 * else on either CPU is an outlier on a shared machine. */
	printf("cacheline cpu_a=%d cpu_b=%d round_trips=%zu rtt_ns=%.1f rtt_ns_min=%.1f rtt_ns_p99=%.1f\n", o->cpu[0],
	       o->cpu[1], n * PP_BATCH, ffm_percentile(batch, n, 50), batch[0], ffm_percentile(batch, n, 99));
	free(batch);
}

/* ---- memcpy ---- */

static volatile unsigned char sink;

static void memcpy_bw(size_t size, double secs)
{
	unsigned char *src = ffm_alloc(size), *dst = ffm_alloc(size);
	/* Each timed chunk copies at least 64 MiB (or one buffer), so the
	 * clock's cost is noise; the median chunk is reported. */
	size_t reps = size >= (64u << 20) ? 1 : (64u << 20) / size;
	double rate[256], end;
	int n = 0;

	memcpy(dst, src, size); /* warm: both buffers in cache if they fit */
	for (end = ffm_now() + secs; n < 3 || (ffm_now() < end && n < 256);) {
		double t0 = ffm_now();

		for (size_t i = 0; i < reps; i++) {
			memcpy(dst, src, size);
			src[i % size] ^= 1; /* a copy the compiler cannot hoist */
		}
		rate[n++] = (double)size * (double)reps / (ffm_now() - t0) / 1e9;
		sink = dst[size / 2];
	}
	qsort(rate, (size_t)n, sizeof(rate[0]), ffm_cmp_double);
	printf("memcpy size=%zu copies=%zu gb_s=%.2f gb_s_max=%.2f\n", size, reps * (size_t)n,
	       ffm_percentile(rate, (size_t)n, 50), rate[n - 1]);
	free(src);
	free(dst);
}

/* ---- two-copy shared-memory ring ---- */

/* The ring's control page, shared by writer and reader processes. Each
 * index on its own line: the writer owns head, the reader owns tail. */
struct ring_ctl {
	_Alignas(64) _Atomic uint64_t head; /* bytes ever written */
	_Alignas(64) _Atomic uint64_t tail; /* bytes ever read */
	_Alignas(64) _Atomic int ready;	    /* processes at the start line */
	_Atomic int go;
	_Atomic int done; /* the writer wrote its last byte */
	double seconds;	  /* reader: first byte to last byte */
	uint64_t bytes;
};

/* ring_write copies n bytes into the ring, waiting for space. */
static void ring_write(struct ring_ctl *c, unsigned char *data, size_t ring, uint64_t *head,
		       const unsigned char *src, size_t n)
{
	while (n > 0) {
		uint64_t tail = atomic_load_explicit(&c->tail, memory_order_acquire);
		size_t space = ring - (size_t)(*head - tail), pos, first;

		if (space == 0)
			continue;
		space = space < n ? space : n;
		pos = (size_t)(*head % ring);
		first = space < ring - pos ? space : ring - pos;
		memcpy(data + pos, src, first);
		memcpy(data, src + first, space - first);
		*head += space;
		atomic_store_explicit(&c->head, *head, memory_order_release);
		src += space;
		n -= space;
	}
}

/* ring_read copies up to max bytes out; 0 when the writer is done and the
 * ring empty. */
static size_t ring_read(struct ring_ctl *c, const unsigned char *data, size_t ring, uint64_t *tail,
			unsigned char *dst, size_t max)
{
	for (;;) {
		uint64_t head = atomic_load_explicit(&c->head, memory_order_acquire);
		size_t avail = (size_t)(head - *tail), pos, first;

		if (avail == 0) {
			if (atomic_load_explicit(&c->done, memory_order_acquire) &&
			    atomic_load_explicit(&c->head, memory_order_acquire) == *tail)
				return 0;
			continue;
		}
		avail = avail < max ? avail : max;
		pos = (size_t)(*tail % ring);
		first = avail < ring - pos ? avail : ring - pos;
		memcpy(dst, data + pos, first);
		memcpy(dst + first, data, avail - first);
		*tail += avail;
		atomic_store_explicit(&c->tail, *tail, memory_order_release);
		return avail;
	}
}

static void start_line(struct ring_ctl *c, int cpu)
{
	ffm_pin(cpu);
	atomic_fetch_add(&c->ready, 1);
	while (!atomic_load(&c->go))
		;
}

static void ring_writer(struct ring_ctl *c, unsigned char *data, size_t ring, size_t size, double secs, int cpu)
{
	unsigned char *src = ffm_alloc(size);
	uint64_t head = 0;
	double end;

	start_line(c, cpu);
	for (end = ffm_now() + secs; ffm_now() < end;)
		ring_write(c, data, ring, &head, src, size);
	atomic_store_explicit(&c->done, 1, memory_order_release);
	_exit(0);
}

static void ring_reader(struct ring_ctl *c, const unsigned char *data, size_t ring, size_t size, int cpu)
{
	unsigned char *dst = ffm_alloc(size);
	uint64_t tail = 0, bytes = 0;
	double t0 = 0;
	size_t n;

	start_line(c, cpu);
	while ((n = ring_read(c, data, ring, &tail, dst, size)) > 0) {
		if (bytes == 0)
			t0 = ffm_now();
		bytes += n;
	}
	c->seconds = ffm_now() - t0;
	c->bytes = bytes;
	_exit(0);
}

static void ring_bw(const struct limits_opts *o, size_t size)
{
	size_t len = 4096 + o->ring;
	struct ring_ctl *c = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	unsigned char *data = (unsigned char *)c + 4096;
	pid_t w, r;
	int st1, st2;

	if (c == MAP_FAILED)
		ffm_die("map the ring");
	memset(data, 0, o->ring); /* fault the ring in before the clock starts */
	fflush(stdout);
	if ((w = fork()) == 0)
		ring_writer(c, data, o->ring, size, o->secs, o->cpu[0]);
	if ((r = fork()) == 0)
		ring_reader(c, data, o->ring, size, o->cpu[1]);
	if (w < 0 || r < 0)
		ffm_die("fork the ring's writer and reader");
	while (atomic_load(&c->ready) < 2)
		usleep(100);
	atomic_store(&c->go, 1);
	if (waitpid(w, &st1, 0) < 0 || waitpid(r, &st2, 0) < 0)
		ffm_die("wait for the ring's writer and reader");
	if (!WIFEXITED(st1) || !WIFEXITED(st2) || WEXITSTATUS(st1) || WEXITSTATUS(st2) || c->seconds <= 0)
		ffm_fail("the ring's writer or reader failed");
	printf("ring size=%zu ring=%zu cpu_a=%d cpu_b=%d bytes=%llu seconds=%.3f gb_s=%.2f\n", size, o->ring, o->cpu[0],
	       o->cpu[1], (unsigned long long)c->bytes, c->seconds, (double)c->bytes / c->seconds / 1e9);
	munmap(c, len);
}

/* ---- options ---- */

static void limits_args(int argc, char **argv, struct limits_opts *o)
{
	static const struct option opts[] = {
		{"cpus", required_argument, NULL, 'c'},	 {"ms", required_argument, NULL, 'm'},
		{"memcpy", required_argument, NULL, 'M'}, {"ring-sizes", required_argument, NULL, 'R'},
		{"ring", required_argument, NULL, 'r'},	 {NULL, 0, NULL, 0},
	};
	size_t ring[1];
	int c;

	*o = (struct limits_opts){.cpu = {0, 1}, .secs = 0.2, .ring = 256 << 10};
	o->n_memcpy = ffm_parse_sizes("4096,262144,8388608,134217728", o->memcpy_sizes, MAX_SIZES);
	o->n_ring = ffm_parse_sizes("1024,16384,131072,1048576", o->ring_sizes, MAX_SIZES);
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			if (sscanf(optarg, "%d,%d", &o->cpu[0], &o->cpu[1]) != 2 || o->cpu[0] < 0 || o->cpu[1] < 0 ||
			    o->cpu[0] == o->cpu[1])
				ffm_fail("--cpus wants two different CPUs, e.g. 0,1; got %s", optarg);
			break;
		case 'm':
			o->secs = atof(optarg) / 1000;
			if (o->secs <= 0 || o->secs > 60)
				ffm_fail("--ms wants 1 to 60000; got %s", optarg);
			break;
		case 'M':
			if ((o->n_memcpy = ffm_parse_sizes(optarg, o->memcpy_sizes, MAX_SIZES)) < 0)
				ffm_fail("--memcpy wants sizes in bytes, e.g. 4096,262144; got %s", optarg);
			break;
		case 'R':
			if ((o->n_ring = ffm_parse_sizes(optarg, o->ring_sizes, MAX_SIZES)) < 0)
				ffm_fail("--ring-sizes wants sizes in bytes, e.g. 1024,65536; got %s", optarg);
			break;
		case 'r':
			if (ffm_parse_sizes(optarg, ring, 1) != 1 || (ring[0] & (ring[0] - 1)) || ring[0] < 4096)
				ffm_fail("--ring wants a power of two of at least 4096 bytes; got %s", optarg);
			o->ring = ring[0];
			break;
		default:
			ffm_fail("limits: unknown option (see ffmem without arguments)");
		}
	}
	if (optind != argc)
		ffm_fail("limits: unexpected argument %s", argv[optind]);
}

int ffm_limits(int argc, char **argv)
{
	struct limits_opts o;

	limits_args(argc, argv, &o);
	if (o.cpu[0] >= sysconf(_SC_NPROCESSORS_ONLN) || o.cpu[1] >= sysconf(_SC_NPROCESSORS_ONLN))
		ffm_fail("limits needs CPUs %d and %d; this machine has %ld", o.cpu[0], o.cpu[1],
			 sysconf(_SC_NPROCESSORS_ONLN));
	cacheline(&o);
	for (int i = 0; i < o.n_memcpy; i++)
		memcpy_bw(o.memcpy_sizes[i], o.secs / 2);
	for (int i = 0; i < o.n_ring; i++)
		ring_bw(&o, o.ring_sizes[i]);
	return 0;
}
