/* SPDX-License-Identifier: MIT */
/* Description: connections decided over a link (most on a reused channel) and moved down to the kernel channel right after the swap, thousands in a row: by the acceptor right after accept() (fd passed with SCM_RIGHTS, or fork, which also drops its accepting links), by the connector right after connect() (fork), or both; with and without bytes in flight before the move, acceptors quick and slow to accept, both processes pinned to one core or not. Every connection swapped, then moved down, both streams intact and in order, no reset, no hang */
/* Channels: shm-link */
#include "shimtest.h"

#define ITERS		2000
#define MAX_N		(48u << 10)	/* each way; both ends' sends fit in the buffers */
#define SLOW_MAX_US	400		/* an acceptor late by this is still within the 5 ms offer wait */
#define HANG_S		25		/* below the runner's 30 s: a hang fails with a message */

/* What connection i does, the same at both ends. */
struct plan {
	int acc_pass, acc_fork, conn_fork;	/* who moves down, and how */
	int pinned;				/* both processes on one core */
	size_t n, pre_c, pre_a;			/* bytes each way; sent before the move */
	unsigned slow_us;			/* the acceptor's delay before accept() */
};

static uint32_t mix(uint32_t x)
{
	x ^= x >> 16;
	x *= 0x7feb352du;
	x ^= x >> 15;
	x *= 0x846ca68bu;
	return x ^ (x >> 16);
}

static struct plan plan_of(int i)
{
	uint32_t h = mix((uint32_t)i), h2 = mix(h);
	int who = (int)(h % 3);		/* 0 acceptor, 1 connector, 2 both */
	struct plan p = {
		.acc_pass = who != 1, .conn_fork = who != 0,
		.pinned = (h >> 2) & 1,
		.n = 1 + h2 % MAX_N,
		.slow_us = (h >> 3) & 1 ? (h2 >> 8) % SLOW_MAX_US : 0,
	};

	/* A fork at the acceptor drops its links: rare, so most connections stay linked. */
	if (p.acc_pass && (h >> 4) % 16 == 0) {
		p.acc_pass = 0;
		p.acc_fork = 1;
	}
	if ((h >> 8) & 1)
		p.pre_c = (h >> 10) % (p.n + 1);
	if ((h >> 9) & 1)
		p.pre_a = (h2 >> 12) % (p.n + 1);
	return p;
}

static void pin(int on)
{
	static cpu_set_t all;
	static int saved;
	cpu_set_t one;

	if (!saved)
		saved = !sched_getaffinity(0, sizeof(all), &all);
	CPU_ZERO(&one);
	CPU_SET(0, &one);
	sched_setaffinity(0, sizeof(cpu_set_t), on ? &one : &all);
}

static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A late acceptor: busy, not asleep, as a loop serving other work is. */
static void busy_us(unsigned us)
{
	int64_t end = now_us() + us;

	while (now_us() < end)
		;
}

/* Move fd down now with a fork whose child leaves at once; the child's pid. */
static pid_t fork_now(void)
{
	pid_t pid = fork();

	if (pid == 0)
		_exit(0);
	CHECK(pid > 0, "fork: %s", strerror(errno));
	return pid;
}

/* Move fd down by passing it with SCM_RIGHTS over pass (both ends ours); the copy is closed. */
static void pass_fd(int pass[2], int fd)
{
	int got;

	t_send_fds(pass[0], "p", 1, &fd, 1);
	got = t_recv_fd(pass[1]);
	CHECK(got >= 0, "the fd passed to ourselves: none came with SCM_RIGHTS");
	close(got);
}

/*
 * One end of connection i: seeds 2i (connector to acceptor) and 2i + 1.
 * The move happens after pre bytes of ours were written, before anything
 * is read; then the rest is written and the peer's stream read whole.
 */
static void serve_end(int fd, int i, size_t pre, int conn, int moved_by_fork, int pass[2],
		      int move)
{
	const struct plan p = plan_of(i);
	uint8_t out = (uint8_t)(2 * i + !conn), in = (uint8_t)(2 * i + conn);
	ino_t bell = t_ino(fd);
	pid_t child = 0;
	int r;

	CHECK(t_real_domain(fd) == AF_UNIX, "connection %d (%s): not swapped", i,
	      conn ? "connector" : "acceptor");
	CHECK(t_send_stream_from(fd, 0, pre, out) == 0, "connection %d: %s: first %zu bytes", i,
	      conn ? "connector" : "acceptor", pre);
	if (move && moved_by_fork)
		child = fork_now();
	else if (move)
		pass_fd(pass, fd);
	r = t_duplex(fd, pre, out, 0, in, p.n);
	CHECK(r == 0,
	      "connection %d (%s, plan: acc_pass %d acc_fork %d conn_fork %d pinned %d n %zu pre %zu/%zu slow %u us): %s (%s)",
	      i, conn ? "connector" : "acceptor", p.acc_pass, p.acc_fork, p.conn_fork, p.pinned,
	      p.n, p.pre_c, p.pre_a, p.slow_us, r == -2 ? "bytes corrupted" : "cut short",
	      strerror(errno));
	/* The peer's end adopts at its next call on it, which the streams may not need. */
	CHECK(!move || t_moved_down(fd, bell),
	      "connection %d (%s): not on a kernel channel after its move", i,
	      conn ? "connector" : "acceptor");
	close(fd);
	if (child)
		t_wait_child(child, "the forked child");
}

/* Distinct channels the links made here, seen mapped after each connection. */
static unsigned long chans[ITERS * 2];
static int nchans;

static int client(uint16_t port)
{
	int linked;

	alarm(HANG_S);
	for (int i = 0; i < ITERS && !t_failures; i++) {
		struct plan p = plan_of(i);
		int fd;

		pin(p.pinned);
		fd = t_connect(AF_INET, port);
		serve_end(fd, i, p.pre_c, 1, 1, NULL, p.conn_fork);
		t_note_link_channels(chans, &nchans, ITERS * 2);
	}
	/* The links kept their channels and offered them again, moved down or not. */
	linked = t_ledger_ends(0);
	CHECK(nchans > 0 && nchans * 4 < linked, "%d channels made for %d linked connection ends",
	      nchans, linked);
	printf("%d channels made for %d linked connection ends\n", nchans, linked);
	fflush(stdout);
	return t_exit_code();
}

int main(int argc, char **argv)
{
	int lfd, pass[2], asks, i;
	int64_t start;
	pid_t pid;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	/* A reset peer fails a check, with a message, rather than killing the writer. */
	signal(SIGPIPE, SIG_IGN);
	CHECK(!socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pass), "socketpair");
	start = t_ms();
	lfd = t_fork_client(client, &pid);
	alarm(HANG_S);
	for (i = 0; i < ITERS && !t_failures; i++) {
		struct plan p = plan_of(i);
		int fd;

		pin(p.pinned);
		busy_us(p.slow_us);
		fd = accept(lfd, NULL, NULL);
		CHECK(fd >= 0, "accept %d: %s", i, strerror(errno));
		if (fd < 0)
			break;
		serve_end(fd, i, p.pre_a, 0, p.acc_fork, pass, p.acc_pass || p.acc_fork);
	}
	t_wait_child(pid, "client");
	close(lfd);
	asks = t_agent_count("ask");
	printf("%d connections in %lld ms, %d asks to the agent\n", i,
	       (long long)(t_ms() - start), asks);
	/* Most over the link: the first, those after an acceptor's fork or a link's expiry asked. */
	CHECK(asks < ITERS / 2, "%d asks for %d connections: the links were not used", asks,
	      ITERS);
	return t_shim_finish();
}
