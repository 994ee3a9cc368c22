/*
 * iouring-accept PORT single|multishot: an echo server that accepts
 * through io_uring (IORING_OP_ACCEPT, one entry per connection or one
 * multishot entry for all), with raw system calls through libc's
 * syscall() as libuv and Rust's io-uring crate make them (no liburing),
 * one connection at a time: echo what it reads until EOF, then close.
 * It prints "accepting" once its first accept was submitted.
 */
#define _GNU_SOURCE
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static void die(const char *what)
{
	perror(what);
	exit(1);
}

struct ring {
	int fd;
	unsigned *sq_tail, *sq_array, sq_mask, *cq_head, *cq_tail, cq_mask;
	struct io_uring_sqe *sqes;
	struct io_uring_cqe *cqes;
};

static void ring_init(struct ring *r)
{
	struct io_uring_params p = { 0 };
	uint8_t *sq, *cq;

	r->fd = (int)syscall(SYS_io_uring_setup, 4, &p);
	if (r->fd < 0)
		die("io_uring_setup");
	sq = mmap(NULL, p.sq_off.array + p.sq_entries * sizeof(unsigned), PROT_READ | PROT_WRITE,
		  MAP_SHARED, r->fd, IORING_OFF_SQ_RING);
	cq = mmap(NULL, p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe),
		  PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, IORING_OFF_CQ_RING);
	r->sqes = mmap(NULL, p.sq_entries * sizeof(*r->sqes), PROT_READ | PROT_WRITE, MAP_SHARED,
		       r->fd, IORING_OFF_SQES);
	if (sq == MAP_FAILED || cq == MAP_FAILED || r->sqes == MAP_FAILED)
		die("mmap the ring");
	r->sq_tail = (unsigned *)(sq + p.sq_off.tail);
	r->sq_array = (unsigned *)(sq + p.sq_off.array);
	r->sq_mask = *(unsigned *)(sq + p.sq_off.ring_mask);
	r->cq_head = (unsigned *)(cq + p.cq_off.head);
	r->cq_tail = (unsigned *)(cq + p.cq_off.tail);
	r->cq_mask = *(unsigned *)(cq + p.cq_off.ring_mask);
	r->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
}

/* Submit an accept on lfd (multishot: one for every connection to come). */
static void submit_accept(struct ring *r, int lfd, int multishot)
{
	unsigned t = *r->sq_tail;
	struct io_uring_sqe *e = &r->sqes[t & r->sq_mask];

	memset(e, 0, sizeof(*e));
	e->opcode = IORING_OP_ACCEPT;
	e->fd = lfd;
	e->ioprio = multishot ? IORING_ACCEPT_MULTISHOT : 0;
	r->sq_array[t & r->sq_mask] = t & r->sq_mask;
	__atomic_store_n(r->sq_tail, t + 1, __ATOMIC_RELEASE);
	if (syscall(SYS_io_uring_enter, r->fd, 1, 0, 0, NULL, 0) < 0)
		die("io_uring_enter (submit)");
}

/* The next completion's result, waited for; *more: a multishot accept goes on. */
static int next_completion(struct ring *r, int *more)
{
	unsigned h = *r->cq_head;
	struct io_uring_cqe *c;

	while (h == __atomic_load_n(r->cq_tail, __ATOMIC_ACQUIRE))
		if (syscall(SYS_io_uring_enter, r->fd, 0, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0)
			die("io_uring_enter (wait)");
	c = &r->cqes[h & r->cq_mask];
	*more = !!(c->flags & IORING_CQE_F_MORE);
	__atomic_store_n(r->cq_head, h + 1, __ATOMIC_RELEASE);
	return c->res;
}

static void echo(int fd)
{
	char buf[65536];
	ssize_t n;

	while ((n = read(fd, buf, sizeof(buf))) > 0)
		for (ssize_t off = 0, w; off < n; off += w)
			if ((w = write(fd, buf + off, (size_t)(n - off))) <= 0) {
				perror("write");
				return;
			}
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	int one = 1, lfd, multishot, more = 0;
	struct ring r;

	if (argc != 3)
		return 2;
	a.sin_port = htons((uint16_t)atoi(argv[1]));
	multishot = !strcmp(argv[2], "multishot");
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(lfd, (void *)&a, sizeof(a)) || listen(lfd, 128))
		die("listen");
	ring_init(&r);
	submit_accept(&r, lfd, multishot);
	printf("accepting\n");
	fflush(stdout);
	for (;;) {
		int fd = next_completion(&r, &more);

		if (fd < 0) {
			fprintf(stderr, "accept: %s\n", strerror(-fd));
		} else {
			echo(fd);
			close(fd);
		}
		if (!more)
			submit_accept(&r, lfd, multishot);
	}
}
