/* SPDX-License-Identifier: MIT */
/* Description: io_uring (set up and entered through libc's syscall(), as libuv and Rust's io-uring crate do) on a swapped socket: IORING_OP_RECV/READ get the peer's bytes intact and no EOF, IORING_OP_SEND/WRITE reach the peer intact, IORING_OP_CLOSE closes as close() does (a 1 MiB file on that number reads intact, the agent hears CLOSED) */
/* Channels: unix host-tcp shm */
#include <linux/io_uring.h>
#include <sys/mman.h>

#include "shimtest.h"

#define N	100000

/* A ring of a few entries, submitted one at a time and waited for. */
struct uring {
	int fd;
	unsigned *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail, *cq_mask;
	struct io_uring_sqe *sqes;
	struct io_uring_cqe *cqes;
};

static int uring_init(struct uring *u)
{
	struct io_uring_params p = { 0 };
	size_t sq_len, cq_len;
	uint8_t *sq, *cq;

	u->fd = (int)syscall(SYS_io_uring_setup, 8, &p);
	if (u->fd < 0)
		return -1;
	sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
	cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
	if (p.features & IORING_FEAT_SINGLE_MMAP)
		sq_len = cq_len = sq_len > cq_len ? sq_len : cq_len;
	sq = mmap(NULL, sq_len, PROT_READ | PROT_WRITE, MAP_SHARED, u->fd, IORING_OFF_SQ_RING);
	cq = p.features & IORING_FEAT_SINGLE_MMAP ? sq :
	     mmap(NULL, cq_len, PROT_READ | PROT_WRITE, MAP_SHARED, u->fd, IORING_OFF_CQ_RING);
	u->sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
		       MAP_SHARED, u->fd, IORING_OFF_SQES);
	if (sq == MAP_FAILED || cq == MAP_FAILED || u->sqes == MAP_FAILED)
		return -1;
	u->sq_tail = (unsigned *)(sq + p.sq_off.tail);
	u->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
	u->sq_array = (unsigned *)(sq + p.sq_off.array);
	u->cq_head = (unsigned *)(cq + p.cq_off.head);
	u->cq_tail = (unsigned *)(cq + p.cq_off.tail);
	u->cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
	u->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
	return 0;
}

/* One operation on fd, submitted and waited for: its result (bytes or -errno). */
static int uring_op(struct uring *u, uint8_t op, int fd, void *buf, unsigned len)
{
	unsigned tail = *u->sq_tail, i = tail & *u->sq_mask, head;
	struct io_uring_sqe *e = &u->sqes[i];
	int res;

	memset(e, 0, sizeof(*e));
	e->opcode = op;
	e->fd = fd;
	e->addr = (uintptr_t)buf;
	e->len = len;
	if (op == IORING_OP_READ || op == IORING_OP_WRITE)
		e->off = (uint64_t)-1;	/* the current position, as for a socket */
	u->sq_array[i] = i;
	__atomic_store_n(u->sq_tail, tail + 1, __ATOMIC_RELEASE);
	if (syscall(SYS_io_uring_enter, u->fd, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) != 1)
		return -errno;
	head = *u->cq_head;
	if (head == __atomic_load_n(u->cq_tail, __ATOMIC_ACQUIRE))
		return -EIO;
	res = u->cqes[head & *u->cq_mask].res;
	__atomic_store_n(u->cq_head, head + 1, __ATOMIC_RELEASE);
	return res;
}

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
