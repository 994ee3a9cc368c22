/* SPDX-License-Identifier: MIT */
/* Description: io_uring (set up and entered through libc's syscall(), as libuv and Rust's io-uring crate do) on a swapped socket: IORING_OP_RECV/READ get the peer's bytes intact and no EOF, IORING_OP_SEND/WRITE reach the peer intact, IORING_OP_CLOSE closes as close() does (a 1 MiB file on that number reads intact, the agent hears CLOSED) */
/* Channels: unix host-tcp shm */
#include "shimtest.h"
#include "uring.h"

#define N	100000

struct uring_io {
	struct uring *u;
	uint8_t op;
};

/* t_io_fn through the ring: a result of 0 (EOF) or an error fails the stream. */
static ssize_t uring_io(int fd, void *buf, size_t n, void *ctx)
{
	struct uring_io *io = ctx;
	int r = uring_op(io->u, io->op, fd, buf, (unsigned)n);

	if (r <= 0)
		fprintf(stderr, "io_uring op %u on fd %d: %s\n", io->op, fd,
			r ? strerror(-r) : "0 bytes (EOF)");
	return r;
}

/* The peer writes, sfd receives through the ring; then sfd sends through it, the peer reads. */
static void both_ways(struct uring *u, int cfd, int sfd, uint8_t in_op, uint8_t out_op,
		      const char *name)
{
	struct uring_io in = { u, in_op }, out = { u, out_op };

	CHECK(t_send_stream(cfd, N, 1) == 0, "%s: the peer's write", name);
	CHECK(t_get_stream(sfd, 0, N, 1, uring_io, &in) == 0,
	      "%s: the peer's bytes did not arrive intact through io_uring", name);
	CHECK(t_put_stream(sfd, 0, N, 2, uring_io, &out) == 0, "%s: the send through io_uring",
	      name);
	CHECK(t_recv_stream(cfd, N, 2) == 0, "%s: the peer did not read intact what io_uring sent",
	      name);
}

int main(int argc, char **argv)
{
	struct timeval tv = { .tv_sec = 5 };
	struct uring u;
	int cfd, sfd, before;

	(void)argc;
	t_setup_swapped_pair(argv, &cfd, &sfd);
	if (uring_init(&u)) {
		printf("no io_uring here: %s\n", strerror(errno));
		return T_EXIT_SKIP;
	}
	/* A peer that would wait forever fails the test instead. */
	setsockopt(cfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	both_ways(&u, cfd, sfd, IORING_OP_RECV, IORING_OP_SEND, "RECV/SEND");
	both_ways(&u, cfd, sfd, IORING_OP_READ, IORING_OP_WRITE, "READ/WRITE");
	close(cfd);
	close(sfd);

	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(sfd), "second pair not swapped");
	t_agent_await("closed", t_agent_count("closed"));
	before = t_agent_count("closed");
	CHECK(uring_op(&u, IORING_OP_CLOSE, sfd, NULL, 0) == 0, "IORING_OP_CLOSE failed");
	t_closed_then_file("IORING_OP_CLOSE", sfd, cfd, before);
	close(u.fd);
	return t_shim_finish();
}
