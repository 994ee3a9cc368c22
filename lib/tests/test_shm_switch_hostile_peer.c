/* SPDX-License-Identifier: MIT */
/* Description: a peer that breaks the move-down handshake (an S without an fd, with two fds, with a pipe instead of a socket; switch_by naming the victim itself; switch_by set but no S ever; its consumer left busy while the victim moves down) gets the victim ECONNRESET within a bounded time, never a crash, a hang or a leaked fd; a peer that died while busy does not hold the victim's move up, and what it wrote still arrives */
/* Channels: shm shm-link */
#include "shimtest.h"

/* docs/SHM.md, "Layout". The victim is the connector: ring 0 is its tx. */
#define CONS_BUSY_TX	(FF_SHM_OFF_CTL0 + FF_SHM_CTL_CONS_BUSY)

static void poke32(uint8_t *m, unsigned off, uint32_t v)
{
	__atomic_store_n((uint32_t *)(void *)(m + off), v, __ATOMIC_SEQ_CST);
}

/* The byte S on the peer's end of the bell, past the shim, with nfd fds. */
static void raw_switch(int peer, const int *fds, int nfd)
{
	struct t_fds_msg m;
	char s = FF_SHM_SWITCH;

	CHECK(t_fds_msg(&m, &s, 1, fds, nfd) == 0 && t_raw(SYS_sendmsg, peer, &m.mh, 0) == 1,
	      "raw S: %s", strerror(errno));
}

/* The victim's blocking recv fails with ECONNRESET within max_ms. */
static void expect_reset(int fd, const char *what, int64_t max_ms)
{
	int64_t t0 = t_ms();
	char buf[64];
	ssize_t r = recv(fd, buf, sizeof(buf), 0);
	int err = errno;

	CHECK(r == -1 && err == ECONNRESET, "%s: recv gave %zd (%s), want ECONNRESET", what, r,
	      strerror(err));
	CHECK(t_ms() - t0 < max_ms, "%s: took %lld ms", what, (long long)(t_ms() - t0));
	r = send(fd, "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
	CHECK(r == -1, "%s: send afterwards gave %zd", what, r);
}

static void case_s_without_fd(int cfd, int sfd, uint8_t *m)
{
	poke32(m, FF_SHM_OFF_SWITCH_BY, FF_SHM_ACCEPTOR);
	raw_switch(sfd, NULL, 0);
	expect_reset(cfd, "S without an fd", 1000);
}

static void case_s_two_fds(int cfd, int sfd, uint8_t *m)
{
	int sp[2], fds0 = t_count_fds();

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp))
		return;
	poke32(m, FF_SHM_OFF_SWITCH_BY, FF_SHM_ACCEPTOR);
	raw_switch(sfd, sp, 2);
	close(sp[0]);
	close(sp[1]);
	expect_reset(cfd, "S with two fds", 1000);
	CHECK(t_count_fds() == fds0, "S with two fds: %d fds left open", t_count_fds() - fds0);
}

static void case_s_pipe(int cfd, int sfd, uint8_t *m)
{
	int p[2], fds0 = t_count_fds();

	if (pipe(p))
		return;
	poke32(m, FF_SHM_OFF_SWITCH_BY, FF_SHM_ACCEPTOR);
	raw_switch(sfd, p, 1);
	close(p[0]);
	close(p[1]);
	expect_reset(cfd, "S with a pipe", 1000);
	CHECK(t_count_fds() == fds0, "S with a pipe: %d fds left open", t_count_fds() - fds0);
}

static void case_switch_by_self(int cfd, int sfd, uint8_t *m)
{
	(void)sfd;
	/* The victim never moved down: it must not take the bell socket for the channel. */
	poke32(m, FF_SHM_OFF_SWITCH_BY, FF_SHM_CONNECTOR);
	expect_reset(cfd, "switch_by naming the victim", 1000);
}

static void case_no_s(int cfd, int sfd, uint8_t *m)
{
	(void)sfd;
	poke32(m, FF_SHM_OFF_SWITCH_BY, FF_SHM_ACCEPTOR);
	expect_reset(cfd, "switch_by without S", 3000);
}

/* The victim moves down (splice needs a kernel socket) while the peer's consumer looks busy. */
static void case_busy_forever(int cfd, int sfd, uint8_t *m)
{
	int p[2];
	int64_t t0;
	ssize_t r;

	(void)sfd;
	if (pipe(p))
		return;
	CHECK(send(cfd, "abc", 3, 0) == 3, "busy: setup");
	poke32(m, CONS_BUSY_TX, 1);
	t0 = t_ms();
	r = splice(cfd, NULL, p[1], NULL, 1, SPLICE_F_NONBLOCK);
	CHECK(r == -1 && errno == ECONNRESET, "busy: splice gave %zd (%s), want ECONNRESET", r,
	      strerror(errno));
	CHECK(t_ms() - t0 < 2000, "busy: took %lld ms", (long long)(t_ms() - t0));
	expect_reset(cfd, "busy, afterwards", 1000);
	close(p[0]);
	close(p[1]);
}

/* The peer dies (its bell closes) with its consumer flag left up: no wait, its bytes arrive. */
static void case_busy_dead(int cfd, int sfd, uint8_t *m)
{
	char buf[8] = { 0 };
	int p[2];
	int64_t t0;
	ssize_t r;

	if (pipe(p))
		return;
	CHECK(send(sfd, "hello", 5, 0) == 5, "dead: setup");
	poke32(m, CONS_BUSY_TX, 1);
	t_raw(SYS_close, sfd);	/* its last copy of the bell socket, past the shim */
	t0 = t_ms();
	r = splice(cfd, NULL, p[1], NULL, 5, 0);
	CHECK(r == 5 && read(p[0], buf, 5) == 5 && !memcmp(buf, "hello", 5),
	      "dead: splice gave %zd (%s), the peer's bytes %.5s", r, strerror(errno), buf);
	CHECK(t_ms() - t0 < 500, "dead: took %lld ms", (long long)(t_ms() - t0));
	CHECK(read(cfd, buf, 1) == 0, "dead: no EOF after the peer's bytes");
	close(p[0]);
	close(p[1]);
}

int main(int argc, char **argv)
{
	static void (*const cases[])(int, int, uint8_t *) = {
		case_s_without_fd, case_s_two_fds, case_s_pipe, case_switch_by_self, case_no_s,
		case_busy_forever, case_busy_dead,
	};

	(void)argc;
	return t_run_shm_cases(argv, cases, sizeof(cases) / sizeof(cases[0]));
}
