/* SPDX-License-Identifier: MIT */
/*
 * The virtual verbs device's command file (docs/VERBS.md, "Completion
 * events"). In a container /dev/infiniband/uverbs* is /dev/null, and
 * libibverbs makes a completion channel (ibv_create_comp_channel) by
 * writing a CREATE_COMP_CHANNEL command to it and taking the new fd from
 * the response the kernel writes, with no provider hook in between. So
 * open() marks such a file in the fd table, and write() on it answers that
 * one command as the kernel would: a new fd, close-on-exec, that read()
 * and poll() wait on. It is a pipe opened read-write (through /proc, which
 * Linux allows for a pipe), so that a read waits for the provider's events
 * instead of seeing EOF while no writer is open; the provider opens its own
 * writer of it per CQ. Every other command goes to /dev/null, as before.
 *
 * Only an absolute path under /dev/infiniband/ is looked at, after the
 * kernel opened it (so the path was readable), and only such a path starts
 * the library; the command and the response go through
 * process_vm_readv/writev, so a bad pointer fails the write with EFAULT as
 * the kernel's would.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <rdma/ib_user_verbs.h>

#include "calls/calls.h"
#include "proc/proc.h"

#define UVERBS_DIR	"/dev/infiniband/"

struct comp_channel_cmd {
	struct ib_uverbs_cmd_hdr hdr;
	struct ib_uverbs_create_comp_channel cmd;
};

/* A pipe's read end that is also a writer: reads wait, never see EOF. */
static int make_channel(void)
{
	char path[32];
	int p[2], fd, err;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", p[0]);
	fd = ff_real.open(path, O_RDWR | O_CLOEXEC);
	err = errno;
	ff_real.close(p[0]);
	ff_real.close(p[1]);
	return fd < 0 ? -err : fd;
}

ssize_t ff_uverbs_write(const void *buf, size_t n)
{
	struct comp_channel_cmd req;
	struct ib_uverbs_create_comp_channel_resp resp = { 0 };
	struct iovec from = { &resp, sizeof(resp) }, to = { .iov_len = sizeof(resp) };
	int err, fd;

	if (n != sizeof(req))
		return 0;
	if ((err = ff_user_read(&req, buf, sizeof(req))))
		return err;
	if (req.hdr.command != IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL)
		return 0;
	/* The kernel's checks of a legacy write command. */
	if (req.hdr.in_words * 4u != sizeof(req) || req.hdr.out_words * 4u < sizeof(resp))
		return -EINVAL;
	if ((fd = make_channel()) < 0)
		return fd;
	resp.fd = (__u32)fd;
	to.iov_base = (void *)(uintptr_t)req.cmd.response;
	if (process_vm_writev(getpid(), &from, 1, &to, 1, 0) != (ssize_t)sizeof(resp)) {
		err = errno;
		ff_real.close(fd);
		return err == EPERM || err == ENOSYS ? -err : -EFAULT;
	}
	return (ssize_t)n;
}

/*
 * After the kernel opened path as fd: a verbs device's command file, or
 * rdma_cm's (an event channel, rdmacm.c), is marked, the library started first if it was not (only then: the path
 * was not looked at before the kernel read it).
 */
static void opened(int fd, const char *path)
{
	const char *name = path + sizeof(UVERBS_DIR) - 1;

	if (fd < 0 || ff_busy || strncmp(path, UVERBS_DIR, sizeof(UVERBS_DIR) - 1))
		return;
	if (!strncmp(name, "uverbs", 6)) {
		ff_init();
		ff_fd_mark(fd, FF_FD_UVERBS);
	} else if (!strcmp(name, "rdma_cm")) {
		ff_init();
		ff_rdmacm_opened(fd);
		ff_fd_mark(fd, FF_FD_RDMACM);
	}
}

typedef int (*open_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);

/*
 * libc's function name, resolved once without starting the library: an
 * allocator opens files under its own lock before anything started it
 * (test_syscall_during_allocator_start), and start-up allocates.
 */
static void *libc_fn(void *_Atomic *slot, const char *name)
{
	void *f = atomic_load_explicit(slot, memory_order_acquire);

	if (!f) {
		f = dlsym(RTLD_NEXT, name);
		atomic_store_explicit(slot, f, memory_order_release);
	}
	return f;
}

/* open's third argument exists only with O_CREAT or O_TMPFILE, as libc reads it. */
#define MODE(flags, mode) do {						\
	va_list ap_;							\
	if ((flags) & (O_CREAT | O_TMPFILE)) {				\
		va_start(ap_, flags);					\
		(mode) = va_arg(ap_, mode_t);				\
		va_end(ap_);						\
	}								\
} while (0)

/* libc's open-like call made (fd, or -1 with errno), the mark; errno as libc left it. */
static int after(int fd, const char *path)
{
	int err = errno;

	opened(fd, path);
	errno = err;
	return fd;
}

static int no_libc(void)
{
	errno = ENOSYS;
	return -1;
}

FF_EXPORT int open(const char *path, int flags, ...)
{
	static void *_Atomic real;
	open_fn f = (open_fn)libc_fn(&real, "open");
	mode_t mode = 0;

	MODE(flags, mode);
	return f ? after(f(path, flags, mode), path) : no_libc();
}

FF_EXPORT int open64(const char *path, int flags, ...)
{
	static void *_Atomic real;
	open_fn f = (open_fn)libc_fn(&real, "open64");
	mode_t mode = 0;

	MODE(flags, mode);
	return f ? after(f(path, flags, mode), path) : no_libc();
}

FF_EXPORT int openat(int dir, const char *path, int flags, ...)
{
	static void *_Atomic real;
	openat_fn f = (openat_fn)libc_fn(&real, "openat");
	mode_t mode = 0;

	MODE(flags, mode);
	return f ? after(f(dir, path, flags, mode), path) : no_libc();
}

FF_EXPORT int openat64(int dir, const char *path, int flags, ...)
{
	static void *_Atomic real;
	openat_fn f = (openat_fn)libc_fn(&real, "openat64");
	mode_t mode = 0;

	MODE(flags, mode);
	return f ? after(f(dir, path, flags, mode), path) : no_libc();
}
