/* SPDX-License-Identifier: MIT */
/* Description: both ends of a shared-memory connection write a whole 4 MiB message (net.core.wmem_max, if less) before they read (blocking sends, then non-blocking on epoll): no deadlock, every byte intact, as over TCP; once the burst has drained and the connection stays idle, it soon holds no more memory than a 256 KiB ring each way */
/* Channels: shm shm-link */
#include <sys/epoll.h>
#include <sys/mman.h>

#include "shimtest.h"
#include "freeflow/shm_layout.h"

/*
 * Per direction: 4 MiB, more than TCP's cold buffers, unless a ring holds
 * less unread: what a move down can take, twice net.core.wmem_max less a
 * margin (docs/SHM.md); wmem_max itself is below that.
 */
static unsigned int N = 4u << 20;
#define DEADLINE_S	60
#define STALL_MS	10000
/* The pages are given back once a ring stays drained for a second (FF_SHM_IDLE_MS). */
#define GIVE_BACK_MS	3000
/*
 * After the burst: the header and the start of each ring that is kept
 * (256 KiB, docs/SHM.md "Giving memory back"), each maybe in a 64 KiB folio.
 */
#define IDLE_MAX	(FF_SHM_HDR_SIZE + 2 * FF_SHM_KEEP + 3 * (64u << 10))

struct end {
	int fd;
	uint8_t out, in;	/* stream seeds */
	uint8_t *msg;
	size_t sent, got;
	int bad;
};

static uint8_t *message(uint8_t seed)
{
	uint8_t *m = malloc(N);

	CHECK(m != NULL, "malloc");
	if (!m)
		exit(T_EXIT_FAIL);
	for (size_t i = 0; i < N; i++)
		m[i] = t_byte(i, seed);
	return m;
}

/* Blocking: send(N) at once, then read it all back. */
static void *write_then_read(void *p)
{
	struct end *e = p;

	if (send(e->fd, e->msg, N, MSG_NOSIGNAL) != (ssize_t)N)
		return p;
	return t_recv_stream(e->fd, N, e->in) ? p : NULL;
}

/* Bytes of the pair's memfd in memory (mincore sees its pages, whichever process touched them). */
static size_t resident(void)
{
	uint8_t *m = t_shm_base();
	uint32_t ring;
	size_t len, pg = (size_t)sysconf(_SC_PAGESIZE), n = 0;
	unsigned char *v;

	CHECK(m != NULL, "no shm mapping");
	if (!m)
		return SIZE_MAX;
	memcpy(&ring, m + 8, 4);
	len = FF_SHM_HDR_SIZE + 2 * (size_t)ring;
	v = malloc(len / pg);
	CHECK(v && mincore(m, len, v) == 0, "mincore: %s", strerror(errno));
	for (size_t i = 0; v && i < len / pg; i++)
		n += v[i] & 1;
	free(v);
	return n * pg;
}

static void blocking_pair(int cfd, int sfd)
{
	struct end c = { .fd = cfd, .out = 1, .in = 2 }, s = { .fd = sfd, .out = 2, .in = 1 };
	struct timespec dl;
	pthread_t tc, ts;
	void *rc = &c, *rs = &s;

	c.msg = message(c.out);
	s.msg = message(s.out);
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += DEADLINE_S;
	pthread_create(&tc, NULL, write_then_read, &c);
	pthread_create(&ts, NULL, write_then_read, &s);
	if (pthread_timedjoin_np(tc, &rc, &dl) || pthread_timedjoin_np(ts, &rs, &dl)) {
		fprintf(stderr, "hang: both ends wrote %u bytes before reading and are still blocked after %d s\n",
			N, DEADLINE_S);
		exit(T_EXIT_FAIL);
	}
	CHECK(rc == NULL && rs == NULL, "blocking: echo not intact (client %s, server %s)",
	      rc ? "failed" : "ok", rs ? "failed" : "ok");
	free(c.msg);
	free(s.msg);
}

/* Non-blocking: write until all is in (waiting for EPOLLOUT), then read until all is out. */
static int step(struct end *e, int ep)
{
	uint8_t buf[65536];
	ssize_t n = -1;

	while (e->sent < N && (n = write(e->fd, e->msg + e->sent, N - e->sent)) > 0)
		e->sent += (size_t)n;
	if (e->sent < N)
		return errno == EAGAIN ? 0 : -1;
	if (e->got == 0) {
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = e };

		if (epoll_ctl(ep, EPOLL_CTL_MOD, e->fd, &ev))
			return -1;
	}
	while (e->got < N && (n = read(e->fd, buf, sizeof(buf))) > 0)
		for (ssize_t i = 0; i < n; i++, e->got++)
			e->bad |= buf[i] != t_byte(e->got, e->in);
	if (e->got < N && (n == 0 || errno != EAGAIN))
		return -1;
	return 0;
}

static void epoll_pair(int cfd, int sfd)
{
	struct end ends[2] = { { .fd = cfd, .out = 3, .in = 4 }, { .fd = sfd, .out = 4, .in = 3 } };
	int64_t end = t_ms() + DEADLINE_S * 1000;
	int ep = epoll_create1(EPOLL_CLOEXEC);

	for (int i = 0; i < 2; i++) {
		struct epoll_event ev = { .events = EPOLLOUT, .data.ptr = &ends[i] };

		ends[i].msg = message(ends[i].out);
		CHECK(fcntl(ends[i].fd, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
		CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, ends[i].fd, &ev) == 0, "epoll_ctl");
	}
	while (ends[0].got < N || ends[1].got < N) {
		struct epoll_event evs[2];
		int n = epoll_wait(ep, evs, 2, STALL_MS);

		if (n <= 0 || t_ms() > end) {
			fprintf(stderr, "hang on epoll: sent %zu/%zu, got %zu/%zu of %u bytes each way\n",
				ends[0].sent, ends[1].sent, ends[0].got, ends[1].got, N);
			exit(T_EXIT_FAIL);
		}
		for (int i = 0; i < n; i++)
			CHECK(step(evs[i].data.ptr, ep) == 0, "epoll: read or write failed: %s", strerror(errno));
		if (t_failures)
			exit(T_EXIT_FAIL);
	}
	CHECK(!ends[0].bad && !ends[1].bad, "epoll: echo not intact");
	close(ep);
	free(ends[0].msg);
	free(ends[1].msg);
}

int main(int argc, char **argv)
{
	size_t idle;
	int cfd, sfd;

	(void)argc;
	N = t_sysctl_at_most("/proc/sys/net/core/wmem_max", N);
	t_setup_swapped_pair(argv, &cfd, &sfd);
	blocking_pair(cfd, sfd);
	/* Drained and idle: the pages the burst passed past the first 256 KiB of a ring go back. */
	for (int64_t end = t_ms() + GIVE_BACK_MS; (idle = resident()) > IDLE_MAX && t_ms() < end;)
		usleep(1000);
	CHECK(idle <= IDLE_MAX, "idle after the burst: %zu KiB of the channel in memory, want <= %u KiB",
	      idle >> 10, IDLE_MAX >> 10);
	printf("idle after %u KiB each way: %zu KiB of the channel in memory\n", N >> 10, idle >> 10);
	close(cfd);
	close(sfd);

	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(cfd) && t_swapped(sfd), "the second pair is not swapped");
	epoll_pair(cfd, sfd);
	close(cfd);
	close(sfd);
	return t_shim_finish();
}
