/* SPDX-License-Identifier: MIT */
/* Description: the verbs device's command file (/dev/infiniband/uverbs0, /dev/null in a container): CREATE_COMP_CHANNEL written to it, as libibverbs does, is answered as the kernel would: a new close-on-exec fd that waits for events (no EOF) and carries them, whether the file was opened with open, open64 or openat, or is a dup; a bad command or response pointer fails with EFAULT and leaves no fd behind, a malformed command with EINVAL; other commands, and the same bytes written to /dev/null itself, go to /dev/null */
#include <poll.h>
#include <rdma/ib_user_verbs.h>

#include "verbstest.h"

#define BAD	((uintptr_t)16)	/* never mapped: the first page */

struct cmd {
	struct ib_uverbs_cmd_hdr hdr;
	struct ib_uverbs_create_comp_channel cc;
};

/* Write CREATE_COMP_CHANNEL to fd: the answered fd, or -1 with errno. */
static int create(int fd, uint32_t command, uint16_t in_words, uintptr_t resp_at)
{
	struct ib_uverbs_create_comp_channel_resp resp = { .fd = 12345 };
	struct cmd c = { .hdr = { .command = command, .in_words = in_words, .out_words = 1 },
			 .cc = { .response = resp_at ? resp_at : (uintptr_t)&resp } };
	ssize_t n = write(fd, &c, sizeof(c));

	if (n < 0)
		return -1;
	CHECK(n == sizeof(c), "the command write returned %zd", n);
	return resp.fd == 12345 ? -2 : (int)resp.fd;
}

/* fd is a channel as the kernel's: close-on-exec, empty reads wait, events come through. */
static void channel_ok(int ch, const char *how)
{
	struct pollfd p = { .fd = ch, .events = POLLIN };
	uint64_t ev = 0x1234567890, got = 0;
	char path[32];
	int w;

	TV_MUST(ch >= 0, "%s: no channel fd answered (%d)", how, ch);
	CHECK(fcntl(ch, F_GETFD) & FD_CLOEXEC, "%s: the channel is close-on-exec", how);
	CHECK(poll(&p, 1, 0) == 0, "%s: an empty channel reads as ready (EOF?)", how);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", ch);
	w = open(path, O_WRONLY | O_CLOEXEC);
	CHECK(w >= 0 && write(w, &ev, 8) == 8 && read(ch, &got, 8) == 8 && got == ev,
	      "%s: an event written by a writer of it is read back", how);
	close(w);
	close(ch);
}

int main(int argc, char **argv)
{
	volatile uintptr_t bad = BAD;	/* hidden from the compiler's bounds warnings */
	int fd, fd2, null, before;

	(void)argc;
	tv_setup(argv);
	fd = open("/dev/infiniband/uverbs0", O_RDWR | O_CLOEXEC);
	TV_MUST(fd >= 0, "open uverbs0: %s", strerror(errno));
	channel_ok(create(fd, IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL, 4, 0), "open");
	fd2 = dup(fd);
	channel_ok(create(fd2, IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL, 4, 0), "dup");
	close(fd2);
	fd2 = open64("/dev/infiniband/uverbs0", O_RDWR | O_CLOEXEC);
	channel_ok(create(fd2, IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL, 4, 0), "open64");
	close(fd2);
	fd2 = openat(AT_FDCWD, "/dev/infiniband/uverbs0", O_RDWR | O_CLOEXEC);
	channel_ok(create(fd2, IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL, 4, 0), "openat");
	close(fd2);

	/* Bad pointers: EFAULT, and the number a channel would have taken is still free. */
	before = dup(0);
	close(before);
	CHECK(create(fd, IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL, 4, BAD) == -1 && errno == EFAULT,
	      "a bad response pointer: want EFAULT");
	CHECK(write(fd, (const void *)bad, sizeof(struct cmd)) == -1 && errno == EFAULT,
	      "a bad command pointer: want EFAULT");
	fd2 = dup(0);
	CHECK(fd2 == before, "a failed command left an fd behind (%d, want %d free)", fd2, before);
	close(fd2);
	CHECK(create(fd, IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL, 3, 0) == -1 && errno == EINVAL,
	      "in_words that do not match the write: want EINVAL");

	/* Not answered: another command, and /dev/null opened as itself. */
	CHECK(create(fd, IB_USER_VERBS_CMD_QUERY_DEVICE, 4, 0) == -2, "another command was answered");
	null = open("/dev/null", O_WRONLY | O_CLOEXEC);
	CHECK(create(null, IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL, 4, 0) == -2,
	      "the command written to /dev/null itself was answered");
	close(null);
	close(fd);
	return t_shim_finish();
}
