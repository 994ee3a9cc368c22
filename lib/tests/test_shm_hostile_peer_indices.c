/* SPDX-License-Identifier: MIT */
/* Description: a peer that scribbles the shared memory or the bell socket (head past a full ring or backwards, tail past head or backwards, switch_by garbage, a stray byte or a bare switch byte on the bell) gets the victim ECONNRESET, also when it is asleep in recv: never a crash, a hang or an access outside the mapping */
/* Channels: shm shm-link */
#include "shimtest.h"

/* docs/SHM.md, "Layout". The victim is the connector: it reads ring 1, writes ring 0. */
#define HEAD_RX		(FF_SHM_OFF_CTL1 + FF_SHM_CTL_HEAD)
#define TAIL_TX		(FF_SHM_OFF_CTL0 + FF_SHM_CTL_TAIL)
#define RING		(256u << 10)	/* FF_TEST_SHM_RING below */

static void poke64(uint8_t *base, unsigned off, uint64_t v)
{
	__atomic_store_n((uint64_t *)(void *)(base + off), v, __ATOMIC_SEQ_CST);
}

/* A byte on the victim's bell socket, written past the shim onto the peer's end. */
static void raw_bell(int peer, char c)
{
	CHECK(t_raw(SYS_write, peer, &c, 1) == 1, "raw write on the bell: %s", strerror(errno));
}

/* The direction the harm was done to fails first; then the connection stays failed. */
static void expect_reset(int fd, const char *what, int tx_first)
{
	char buf[64];

	for (int i = 0; i < 2; i++) {
		int tx = i == !tx_first;
		ssize_t r = tx ? send(fd, "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT)
			       : recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

		CHECK(r == -1 && errno == ECONNRESET, "%s: %s gave %zd (%s), want ECONNRESET",
		      what, tx ? "send" : "recv", r, strerror(errno));
	}
}

static void case_head_past_full(int cfd, int sfd, uint8_t *m)
{
	(void)sfd;
	poke64(m, HEAD_RX, RING + 1);
	expect_reset(cfd, "head past a full ring", 0);
}

static void case_head_backwards(int cfd, int sfd, uint8_t *m)
{
	char buf[100] = { 0 };

	CHECK(send(sfd, buf, 100, 0) == 100 && recv(cfd, buf, 50, 0) == 50, "setup");
	poke64(m, HEAD_RX, 60);	/* ahead of tail 50, behind head 100 seen */
	expect_reset(cfd, "head backwards", 0);
}

static void case_huge_head(int cfd, int sfd, uint8_t *m)
{
	(void)sfd;
	poke64(m, HEAD_RX, UINT64_MAX - 3);
	expect_reset(cfd, "head near 2^64", 0);
}

static void case_tail_past_head(int cfd, int sfd, uint8_t *m)
{
	char buf[100] = { 0 };

	(void)sfd;
	CHECK(send(cfd, buf, 100, 0) == 100, "setup");
	poke64(m, TAIL_TX, 200);
	expect_reset(cfd, "tail past head", 1);
}

static void case_tail_backwards(int cfd, int sfd, uint8_t *m)
{
	char buf[100] = { 0 };

	CHECK(send(cfd, buf, 100, 0) == 100 && recv(sfd, buf, 100, MSG_WAITALL) == 100 &&
	      send(cfd, buf, 1, 0) == 1, "setup");
	poke64(m, TAIL_TX, 50);
	expect_reset(cfd, "tail backwards", 1);
}

static void case_switch_by(int cfd, int sfd, uint8_t *m)
{
	(void)sfd;
	__atomic_store_n((uint32_t *)(void *)(m + FF_SHM_OFF_SWITCH_BY), 7u, __ATOMIC_SEQ_CST);
	expect_reset(cfd, "switch_by 7", 0);
}

/* The victim asleep in a blocking recv; then the peer does harm and rings. */
struct sleeper {
	int fd;
	ssize_t r;
	int err;
};

static void *sleep_in_recv(void *p)
{
	struct sleeper *s = p;
	char buf[64];

	s->r = recv(s->fd, buf, sizeof(buf), 0);
	s->err = errno;
	return NULL;
}

static void asleep(int cfd, int sfd, uint8_t *m, const char *what, int kind)
{
	struct sleeper s = { .fd = cfd };
	struct timespec ts;
	pthread_t th;
	int joined;

	pthread_create(&th, NULL, sleep_in_recv, &s);
	usleep(100000);		/* well past the spin: asleep on the bell */
	if (kind == 0)
		raw_bell(sfd, 'X');
	else if (kind == 1)
		raw_bell(sfd, FF_SHM_SWITCH);
	else {
		poke64(m, HEAD_RX, 3 * (uint64_t)RING);
		raw_bell(sfd, FF_SHM_BELL);
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 2;
	joined = pthread_timedjoin_np(th, NULL, &ts) == 0;
	CHECK(joined, "%s: the victim still sleeps 2 s later", what);
	if (!joined)
		exit(t_shim_finish());	/* the sleeping thread cannot be joined */
	CHECK(s.r == -1 && s.err == ECONNRESET, "%s: recv gave %zd (%s), want ECONNRESET", what,
	      s.r, strerror(s.err));
}

static void case_stray_byte(int cfd, int sfd, uint8_t *m)
{
	asleep(cfd, sfd, m, "stray byte on the bell", 0);
}

static void case_bare_switch(int cfd, int sfd, uint8_t *m)
{
	asleep(cfd, sfd, m, "S on the bell without switch_by", 1);
}

static void case_asleep_head(int cfd, int sfd, uint8_t *m)
{
	asleep(cfd, sfd, m, "head past a full ring, then a bell", 2);
}

int main(int argc, char **argv)
{
	static void (*const cases[])(int, int, uint8_t *) = {
		case_head_past_full, case_head_backwards, case_huge_head, case_tail_past_head,
		case_tail_backwards, case_switch_by, case_stray_byte, case_bare_switch,
		case_asleep_head,
	};

	(void)argc;
	setenv("FF_TEST_SHM_RING", "262144", 0);	/* read by the fake agent: the cases fill its rings */
	return t_run_shm_cases(argv, cases, sizeof(cases) / sizeof(cases[0]));
}
