/* SPDX-License-Identifier: MIT */
/*
 * A small io_uring for the shim tests, set up and entered through libc's
 * syscall() as libuv and Rust's io-uring crate do (no liburing), so the
 * library follows its submissions (lib/src/calls/routes.c).
 */
#ifndef FREEFLOW_URING_H
#define FREEFLOW_URING_H

#include <errno.h>
#include <linux/io_uring.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

struct uring {
	int fd;
	unsigned *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail, *cq_mask;
	struct io_uring_sqe *sqes;
	struct io_uring_cqe *cqes;
};

/* A ring of 8 entries: 0, or -1 with errno set (no io_uring here). */
static inline int uring_init(struct uring *u)
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

/* Queue entry e (the kernel takes it at the next uring_enter). */
static inline void uring_push(struct uring *u, const struct io_uring_sqe *e)
{
	unsigned tail = *u->sq_tail, i = tail & *u->sq_mask;

	u->sqes[i] = *e;
	u->sq_array[i] = i;
	__atomic_store_n(u->sq_tail, tail + 1, __ATOMIC_RELEASE);
}

/* io_uring_enter: submit the n entries queued, wait for want completions; 0 or -errno. */
static inline int uring_enter(struct uring *u, unsigned n, unsigned want)
{
	long r = syscall(SYS_io_uring_enter, u->fd, n, want, want ? IORING_ENTER_GETEVENTS : 0,
			 NULL, 0);

	return r < 0 ? -errno : 0;
}

/*
 * The next completion, waited for: its result (-EIO if the kernel posted
 * none); *flags (if not NULL) gets its flags (IORING_CQE_F_MORE: a
 * multishot entry goes on).
 */
static inline int uring_next(struct uring *u, unsigned *flags)
{
	unsigned head = *u->cq_head;
	int r;

	if (head == __atomic_load_n(u->cq_tail, __ATOMIC_ACQUIRE) && (r = uring_enter(u, 0, 1)))
		return r;
	if (head == __atomic_load_n(u->cq_tail, __ATOMIC_ACQUIRE))
		return -EIO;
	r = u->cqes[head & *u->cq_mask].res;
	if (flags)
		*flags = u->cqes[head & *u->cq_mask].flags;
	__atomic_store_n(u->cq_head, head + 1, __ATOMIC_RELEASE);
	return r;
}

/* One operation on fd, submitted and waited for: its result (bytes or -errno). */
static inline int uring_op(struct uring *u, uint8_t op, int fd, void *buf, unsigned len)
{
	struct io_uring_sqe e = { .opcode = op, .fd = fd, .addr = (uintptr_t)buf, .len = len };
	int r;

	if (op == IORING_OP_READ || op == IORING_OP_WRITE)
		e.off = (uint64_t)-1;	/* the current position, as for a socket */
	uring_push(u, &e);
	r = uring_enter(u, 1, 1);
	return r ? r : uring_next(u, NULL);
}

#endif
