/* SPDX-License-Identifier: MIT */
/* Description: property: messages of random sizes written with random calls (write, writev, send, sendmsg, sendto) and read back with random sizes and calls (read, readv, recv, recvmsg, recvfrom, MSG_WAITALL, MSG_PEEK first) arrive as one intact stream, with 8 KiB shm rings so every size wraps them; the seed is fixed and printed */
/* Channels: unix host-tcp shm shm-link */
#include <sys/uio.h>

#include "shimtest.h"

#define TOTAL	(48u << 20)
#define MAXMSG	(300u * 1000)
#define SEED	20240601u

/* xorshift64*: the same sequence on every machine. */
static uint64_t rnd(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}

static size_t between(uint64_t *s, size_t lo, size_t hi)
{
	/* Mostly small, sometimes large: sizes around the ring's and the chunk's. */
	if (rnd(s) % 4)
		hi = lo + (hi - lo) / 64;
	return lo + (size_t)(rnd(s) % (hi - lo + 1));
}

/* Split buf[0..n) into up to 4 iovecs at random points. */
static int split(uint64_t *s, uint8_t *buf, size_t n, struct iovec *iov)
{
	int cnt = 1 + (int)(rnd(s) % 4);
	size_t off = 0;

	for (int i = 0; i < cnt; i++) {
		size_t k = i == cnt - 1 ? n - off : (size_t)(rnd(s) % (n - off + 1));

		iov[i] = (struct iovec){ buf + off, k };
		off += k;
	}
	return cnt;
}

static ssize_t put(int fd, uint64_t *s, uint8_t *buf, size_t n)
{
	struct iovec iov[4];
	struct msghdr mh = { .msg_iov = iov };
	struct sockaddr_in to = { .sin_family = AF_INET };

	switch (rnd(s) % 5) {
	case 0:	return write(fd, buf, n);
	case 1:	return writev(fd, iov, split(s, buf, n, iov));
	case 2:	return send(fd, buf, n, 0);
	case 3:	mh.msg_iovlen = (size_t)split(s, buf, n, iov);
		return sendmsg(fd, &mh, 0);
	default: return sendto(fd, buf, n, 0, (void *)&to, sizeof(to));
	}
}

static int writer(uint16_t port)
{
	static uint8_t buf[MAXMSG];
	uint64_t s = SEED, off = 0;
	int fd = t_connect(AF_INET, port);

	while (off < TOTAL) {
		size_t n = between(&s, 1, MAXMSG), done = 0;

		if (n > TOTAL - off)
			n = (size_t)(TOTAL - off);
		for (size_t i = 0; i < n; i++)
			buf[i] = t_byte(off + i, 3);
		while (done < n) {
			ssize_t w = put(fd, &s, buf + done, n - done);

			if (w <= 0)
				return 1;
			done += (size_t)w;
		}
		off += n;
	}
	close(fd);
	return 0;
}

static ssize_t get(int fd, uint64_t *s, uint8_t *buf, size_t n)
{
	struct iovec iov[4];
	struct msghdr mh = { .msg_iov = iov };
	struct sockaddr_in from;
	socklen_t fl = sizeof(from);

	switch (rnd(s) % 7) {
	case 0:	return read(fd, buf, n);
	case 1:	return readv(fd, iov, split(s, buf, n, iov));
	case 2:	return recv(fd, buf, n, 0);
	case 3:	mh.msg_iovlen = (size_t)split(s, buf, n, iov);
		return recvmsg(fd, &mh, 0);
	case 4:	return recvfrom(fd, buf, n, 0, (void *)&from, &fl);
	case 5:	return recv(fd, buf, n, MSG_WAITALL);
	default: {
		/* What a peek shows must be what the read then takes. */
		uint8_t peek[4096];
		size_t k = n < sizeof(peek) ? n : sizeof(peek);
		ssize_t p = recv(fd, peek, k, MSG_PEEK), r;

		if (p <= 0)
			return p;
		r = read(fd, buf, (size_t)p);
		if (r != p || memcmp(peek, buf, (size_t)p)) {
			fprintf(stderr, "peeked %zd bytes, then read %zd that differ\n", p, r);
			return -2;
		}
		return r;
	}
	}
}

int main(int argc, char **argv)
{
	static uint8_t buf[MAXMSG];
	uint64_t s = SEED * 7919u, got = 0;
	uint16_t port;
	int lfd, fd, bad = 0;
	ssize_t r = 0;
	pid_t pid;

	(void)argc;
	setenv("FF_TEST_SHM_RING", "8192", 0);	/* read by the fake agent */
	t_shim_setup(argv, FA_BROKER);
	printf("seed %u\n", SEED);
	lfd = t_listen(AF_INET, &port);
	pid = fork();
	if (pid == 0)
		_exit(writer(port));
	fd = accept(lfd, NULL, NULL);
	close(lfd);
	CHECK(t_swapped(fd), "not swapped");
	while (got < TOTAL && !bad) {
		r = get(fd, &s, buf, between(&s, 1, MAXMSG));
		if (r <= 0)
			break;
		for (ssize_t i = 0; i < r && !bad; i++)
			bad = buf[i] != t_byte(got + (uint64_t)i, 3);
		if (bad)
			CHECK(0, "stream corrupted near offset %llu", (unsigned long long)got);
		got += (uint64_t)r;
	}
	CHECK(got == TOTAL, "got %llu of %u bytes (last call %zd: %s)", (unsigned long long)got,
	      TOTAL, r, strerror(errno));
	CHECK(read(fd, buf, 1) == 0, "no EOF after the stream");
	t_wait_child(pid, "writer");
	close(fd);
	return t_shim_finish();
}
