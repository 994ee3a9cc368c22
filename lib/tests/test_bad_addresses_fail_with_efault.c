/* SPDX-License-Identifier: MIT */
/* Description: memory the library reads before the kernel does (io_uring_register's fixed-file arrays and argument structs, an io_uring sendmsg's header, clone3's arguments via syscall()), at an address the program got wrong, makes the call fail with EFAULT as without the library, instead of crashing the process in the library; the process's shm connection goes on intact */
/* Channels: shm */
#include <sys/socket.h>

#include "shimtest.h"
#include "uring.h"

#define BAD	((uintptr_t)16)	/* never mapped: the first page */

static long reg(struct uring *u, unsigned op, const void *arg, unsigned nr)
{
	return syscall(SYS_io_uring_register, u->fd, op, arg, nr);
}

static void efault(long r, const char *what)
{
	CHECK(r == -1 && errno == EFAULT, "%s: returned %ld (%s), want EFAULT", what, r,
	      r == -1 ? strerror(errno) : "no error");
}

int main(int argc, char **argv)
{
	int cfd, sfd, sp[2], fds[1];
	struct io_uring_files_update up = { .offset = 0, .fds = BAD };
	struct io_uring_rsrc_register r2 = { .nr = 4, .data = BAD };
	struct io_uring_rsrc_update2 u2 = { .offset = 0, .data = BAD, .nr = 1 };
	struct io_uring_sqe send = { .opcode = IORING_OP_SENDMSG, .addr = BAD };
	long page = sysconf(_SC_PAGESIZE);
	uint8_t *edge;
	struct uring u;

	(void)argc;
	t_setup_swapped_pair(argv, &cfd, &sfd);
	if (uring_init(&u)) {
		printf("no io_uring here: %s\n", strerror(errno));
		return T_EXIT_SKIP;
	}
	efault(reg(&u, IORING_REGISTER_FILES, (void *)BAD, 4), "REGISTER_FILES, array unmapped");
	/* An array whose start is readable and whose end is not. */
	edge = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(edge != MAP_FAILED && munmap(edge + page, page) == 0, "map a page before a hole");
	memset(edge, 0xff, page);	/* -1: no file */
	efault(reg(&u, IORING_REGISTER_FILES, edge + page - 2 * sizeof(int), 300),
	       "REGISTER_FILES, array running into a hole");
	efault(reg(&u, IORING_REGISTER_FILES2, (void *)BAD, sizeof(r2)), "REGISTER_FILES2, argument unmapped");
	efault(reg(&u, IORING_REGISTER_FILES2, &r2, sizeof(r2)), "REGISTER_FILES2, array unmapped");

	/* Updates need a table first. */
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0, "socketpair");
	fds[0] = sp[0];
	CHECK(reg(&u, IORING_REGISTER_FILES, fds, 1) == 0, "register a file: %s", strerror(errno));
	efault(reg(&u, IORING_REGISTER_FILES_UPDATE, (void *)BAD, 1), "FILES_UPDATE, argument unmapped");
	efault(reg(&u, IORING_REGISTER_FILES_UPDATE, &up, 1), "FILES_UPDATE, array unmapped");
	efault(reg(&u, IORING_REGISTER_FILES_UPDATE2, (void *)BAD, sizeof(u2)), "FILES_UPDATE2, argument unmapped");
	efault(reg(&u, IORING_REGISTER_FILES_UPDATE2, &u2, sizeof(u2)), "FILES_UPDATE2, array unmapped");

	/* A sendmsg entry whose header is unmapped: its completion says EFAULT. */
	send.fd = sp[1];
	uring_push(&u, &send);
	CHECK(uring_enter(&u, 1, 1) == 0, "submit the sendmsg");
	CHECK(uring_next(&u, NULL) == -EFAULT, "io_uring sendmsg with its header unmapped: not EFAULT");

	efault(syscall(SYS_clone3, (void *)BAD, 88), "clone3, arguments unmapped");

	/* None of it cost the connection its channel or a byte. */
	CHECK(t_swapped(cfd) && t_swapped(sfd), "the connection left its channel");
	CHECK(t_send_stream(cfd, 1 << 20, 1) == 0 && t_recv_stream(sfd, 1 << 20, 1) == 0,
	      "the connection's bytes did not arrive intact");
	return t_shim_finish();
}
