/* SPDX-License-Identifier: MIT */
/* Description: two threads blocked in recv on one shared-memory fd while the peer writes in bursts, and two threads blocked in send on one fd while the peer reads in bursts: every byte is delivered exactly once and nobody sleeps through a wake-up (no hang) */
/* Channels: unix host-tcp shm shm-link */
#include "shimtest.h"

#define N	(4u << 20)

struct tally {
	int fd;
	uint64_t bytes, sum;
	int bursts;
};

/* Bursts of random sizes with pauses, so that the other side sleeps between them. */
static void *burst_writer(void *p)
{
	struct tally *t = p;
	static uint8_t buf[100000];
	uint64_t s = 12345;

	while (t->bytes < t->bursts * (uint64_t)sizeof(buf) / 2) {
		size_t n;

		s = s * 6364136223846793005ull + 1442695040888963407ull;
		n = 1 + (size_t)((s >> 33) % sizeof(buf));
		for (size_t i = 0; i < n; i++)
			buf[i] = (uint8_t)(t->bytes + i);
		if (write(t->fd, buf, n) != (ssize_t)n)
			return p;
		for (size_t i = 0; i < n; i++)
			t->sum += buf[i];
		t->bytes += n;
		usleep((useconds_t)((s >> 40) % 3000));
	}
	return NULL;
}

/* Until the stream ends: counts and sums the bytes (any split between the readers). */
static void *reader(void *p)
{
	struct tally *t = p;
	uint8_t buf[7777];
	ssize_t r;

	while ((r = read(t->fd, buf, sizeof(buf))) > 0) {
		t->bytes += (uint64_t)r;
		for (ssize_t i = 0; i < r; i++)
			t->sum += buf[i];
	}
	return r == 0 ? NULL : p;
}

static int join_within(pthread_t th, int s, void **ret)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += s;
	return pthread_timedjoin_np(th, ret, &ts) == 0;
}

static void two_readers(void)
{
	struct tally w = { .bursts = 80 }, r1 = { 0 }, r2 = { 0 };
	pthread_t tw, t1, t2;
	void *a, *b, *c;
	int cfd, sfd, ok;

	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(cfd), "not swapped");
	w.fd = sfd;
	r1.fd = r2.fd = cfd;
	pthread_create(&t1, NULL, reader, &r1);
	pthread_create(&t2, NULL, reader, &r2);
	pthread_create(&tw, NULL, burst_writer, &w);
	CHECK(join_within(tw, 20, &a) && a == NULL, "writer");
	shutdown(sfd, SHUT_WR);
	ok = join_within(t1, 5, &b) && join_within(t2, 5, &c);
	CHECK(ok, "a reader is still blocked after the end of the stream");
	if (!ok)
		exit(t_shim_finish());
	CHECK(b == NULL && c == NULL, "a reader failed");
	CHECK(r1.bytes + r2.bytes == w.bytes && r1.sum + r2.sum == w.sum,
	      "readers got %llu bytes (sum %llu), writer sent %llu (sum %llu)",
	      (unsigned long long)(r1.bytes + r2.bytes), (unsigned long long)(r1.sum + r2.sum),
	      (unsigned long long)w.bytes, (unsigned long long)w.sum);
	close(cfd);
	close(sfd);
}

static void *stream_writer(void *p)
{
	struct tally *t = p;
	uint8_t buf[50000];

	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 7);
	while (t->bytes < N / 2) {
		if (write(t->fd, buf, sizeof(buf)) != (ssize_t)sizeof(buf))
			return p;
		t->bytes += sizeof(buf);
		for (size_t i = 0; i < sizeof(buf); i++)
			t->sum += buf[i];
	}
	return NULL;
}

/* Reads in bursts with pauses, so that both writers sleep on a full ring. */
static void *slow_reader(void *p)
{
	struct tally *t = p;
	uint8_t buf[30000];
	ssize_t r;

	while ((r = read(t->fd, buf, sizeof(buf))) > 0) {
		t->bytes += (uint64_t)r;
		for (ssize_t i = 0; i < r; i++)
			t->sum += buf[i];
		if (t->bytes % 7 == 0)
			usleep(2000);
	}
	return r == 0 ? NULL : p;
}

static void two_writers(void)
{
	struct tally w1 = { 0 }, w2 = { 0 }, r = { 0 };
	pthread_t t1, t2, tr;
	void *a, *b, *c;
	int cfd, sfd, ok;

	t_pair(AF_INET, &cfd, &sfd);
	w1.fd = w2.fd = cfd;
	r.fd = sfd;
	pthread_create(&tr, NULL, slow_reader, &r);
	pthread_create(&t1, NULL, stream_writer, &w1);
	pthread_create(&t2, NULL, stream_writer, &w2);
	ok = join_within(t1, 20, &a) && join_within(t2, 20, &b);
	CHECK(ok, "a writer is still blocked");
	if (!ok)
		exit(t_shim_finish());
	shutdown(cfd, SHUT_WR);
	CHECK(join_within(tr, 5, &c) && c == NULL, "reader");
	CHECK(a == NULL && b == NULL, "a writer failed");
	CHECK(r.bytes == w1.bytes + w2.bytes && r.sum == w1.sum + w2.sum,
	      "reader got %llu bytes, writers sent %llu", (unsigned long long)r.bytes,
	      (unsigned long long)(w1.bytes + w2.bytes));
	close(cfd);
	close(sfd);
}

int main(int argc, char **argv)
{
	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	two_readers();
	two_writers();
	return t_shim_finish();
}
