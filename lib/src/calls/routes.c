/* SPDX-License-Identifier: MIT */
/*
 * The other routes to a descriptor: libc's syscall(), close_range and
 * closefrom, stdio on a socket (fdopen, fclose), preadv2/pwritev2, and
 * io_uring. lib/README.md, "Routes around the wrappers", has the whole
 * list and why each is handled so.
 *
 * The rule: a route the shim can follow goes through the same wrapper as
 * the plain call (a close is a close, whatever the entry point: the slot
 * is cleared before the number can be reused, the agent hears CLOSED, the
 * ledger entry and the shared memory go). A route it cannot serve on
 * shared memory (the kernel, or libc's internal I/O, would act on the bell
 * socket) first moves the connection down to its kernel channel
 * (shm/switch.c), and decides a connection still waiting for its decision,
 * or keeps it on the overlay, as a dup before the decision does. Where the
 * shim cannot see what will be done to which fd at all (an io_uring it did
 * not see set up, SQPOLL, liburing's inline system calls), the process
 * moves every shm connection down and takes no new one. A listener a ring
 * accepts on is withdrawn from the agent (listeners.c): what it accepts
 * the shim never sees, so no ACCEPT would meet its connectors' CONNECT.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "calls/calls.h"
#include "core/core.h"
#include "links/links.h"
#include "proc/proc.h"
#include "setup/setup.h"
#include "shm/shm.h"

/* ---- moving one fd off what the kernel cannot see ---- */

void ff_fd_to_kernel(int fd, const char *why)
{
	struct ff_slot *s = ff_slot_enter(fd);
	unsigned fl;

	if (ff_busy || !s)
		return;
	fl = atomic_load(&s->flags);
	/* Established: decided now, as by a data call; still connecting: overlay. */
	if ((fl & FF_FD_PENDING) && ff_settle(fd, 1) == 0)
		fl = atomic_load(&s->flags);
	if ((fl & FF_FD_TRACKED) && !(fl & FF_FD_SWAPPED))
		ff_fd_keep_overlay(fd, why);
	/* Where the library cannot follow it, a socket pair never goes back to shm. */
	ff_resume_passing(fd);
	if (atomic_load(&s->flags) & FF_FD_SHM)
		ff_shm_switch(fd);
}

void ff_shm_avoid(const char *why)
{
	if (ff_busy || ff_vforked())
		return;
	if (atomic_exchange(&ff_shm_avoided, 1))
		return;		/* done once: each later swap moves down itself (negotiate.c) */
	ff_debug("no shared memory in this process from now on: %s", why);
	/* Links make shm connections without the agent; the peers ask it instead. */
	ff_links_drop_all();
	ff_shm_switch_all(0);
}

/* ---- closes ---- */

/*
 * close() for every fd the shim has a slot for in [first, last]: the
 * same bookkeeping as a plain close, before the real call closes the rest.
 */
static void close_tracked(unsigned first, unsigned last)
{
	int hw;

	ff_init();	/* an exec'd image adopts what it carried at start-up (exec.c) */
	hw = ff_table_hiwater();
	for (long fd = first; fd <= hw && fd <= (long)last; fd++) {
		struct ff_slot *s = ff_fd_slot((int)fd);

		if (s && atomic_load_explicit(&s->flags, memory_order_relaxed))
			close((int)fd);
	}
}

FF_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
	/*
	 * CLOSE_RANGE_UNSHARE closes in a copy of the table: for this process
	 * the fds are gone all the same. CLOSE_RANGE_CLOEXEC closes nothing;
	 * exec does, and exec.c moves down what the new image keeps.
	 */
	if (!ff_busy && first <= last && !(flags & CLOSE_RANGE_CLOEXEC))
		close_tracked(first, last);
	return REAL(close_range)(first, last, flags);
}

FF_EXPORT void closefrom(int lowfd)
{
	if (!ff_busy && lowfd >= 0)
		close_tracked((unsigned)lowfd, ~0u);
	REAL(closefrom)(lowfd);
}

/*
 * stdio reads and writes with libc's internal calls, which no wrapper
 * sees: a socket given to stdio leaves shared memory first, and one
 * without its decision stays on the overlay.
 */
FF_EXPORT FILE *fdopen(int fd, const char *mode)
{
	ff_fd_to_kernel(fd, "given to stdio (fdopen)");
	return REAL(fdopen)(fd, mode);
}

/* The fd of fp, about to be closed inside libc: its slot cleared, its conn if that was the last fd. */
static struct ff_conn *stdio_closing(FILE *fp)
{
	struct ff_slot *s = ff_slot_enter(fp ? fileno(fp) : -1);
	struct ff_conn *c;

	if (ff_busy || !s || !atomic_load(&s->flags))
		return NULL;
	ff_table_lock();
	c = ff_fd_forget(fileno(fp));
	ff_table_unlock();
	return c;
}

/* fclose closes the fd inside libc: the same bookkeeping as close(). */
FF_EXPORT int fclose(FILE *fp)
{
	struct ff_conn *c = stdio_closing(fp);
	int ret = REAL(fclose)(fp), err = errno;

	ff_conn_closed(c);
	errno = err;
	return ret;
}

/* freopen with a path closes the stream's fd inside libc, as fclose does. */
static FILE *reopen(FILE *(*real)(const char *, const char *, FILE *), const char *path,
		    const char *mode, FILE *fp)
{
	struct ff_conn *c = path ? stdio_closing(fp) : NULL;
	FILE *ret = real(path, mode, fp);
	int err = errno;

	ff_conn_closed(c);
	errno = err;
	return ret;
}

FF_EXPORT FILE *freopen(const char *path, const char *mode, FILE *fp)
{
	return reopen(REAL(freopen), path, mode, fp);
}

FF_EXPORT FILE *freopen64(const char *path, const char *mode, FILE *fp)
{
	return reopen(REAL(freopen64), path, mode, fp);
}

/* Vectored I/O with an offset and flags: not a socket call the rings serve. */
FF_EXPORT ssize_t preadv2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	ff_fd_to_kernel(fd, "preadv2");
	return REAL(preadv2)(fd, iov, cnt, off, flags);
}

FF_EXPORT ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	ff_fd_to_kernel(fd, "pwritev2");
	return REAL(pwritev2)(fd, iov, cnt, off, flags);
}

/* With _FILE_OFFSET_BITS=64 the headers name them so; the same calls on 64-bit ABIs. */
FF_EXPORT ssize_t preadv64v2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	return preadv2(fd, iov, cnt, off, flags);
}

FF_EXPORT ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
	return pwritev2(fd, iov, cnt, off, flags);
}

/* ---- process copies libc makes without the wrapped entry points ---- */

/* _Fork runs no fork handlers (fork.c): every shm connection moves down first, as for vfork. */
FF_EXPORT pid_t _Fork(void)
{
	if (!ff_busy && !ff_vforked())
		ff_shm_switch_all(0);
	if (!REAL(_Fork)) {
		errno = ENOSYS;
		return -1;
	}
	return ff_real._Fork();
}

/*
 * system and popen spawn a shell with libc's internal posix_spawn, which
 * the exec wrappers never see: the fds the shell inherits (no
 * FD_CLOEXEC) leave shm first.
 */
FF_EXPORT int system(const char *cmd)
{
	if (!ff_busy && cmd && !ff_vforked())
		ff_shm_switch_all(FF_SHM_SWITCH_KEPT);
	return REAL(system)(cmd);
}

FF_EXPORT FILE *popen(const char *cmd, const char *mode)
{
	if (!ff_busy && !ff_vforked())
		ff_shm_switch_all(FF_SHM_SWITCH_KEPT);
	return REAL(popen)(cmd, mode);
}

/* ---- io_uring ---- */

/* Setup flags newer than this libc's headers; the kernel has them. */
#ifndef IORING_SETUP_NO_MMAP
#define IORING_SETUP_NO_MMAP		(1u << 14)
#endif
#ifndef IORING_SETUP_REGISTERED_FD_ONLY
#define IORING_SETUP_REGISTERED_FD_ONLY	(1u << 15)
#endif
#ifndef IORING_SETUP_NO_SQARRAY
#define IORING_SETUP_NO_SQARRAY		(1u << 16)
#endif
/* An io_uring_register opcode flag newer than the headers: the ring is named by its index. */
#ifndef IORING_REGISTER_USE_REGISTERED_RING
#define IORING_REGISTER_USE_REGISTERED_RING	(1u << 31)
#endif
/* Flags whose rings the shim can read: any other (SQPOLL, NO_MMAP, ...) and the process avoids shm. */
#define RING_FLAGS_READABLE	(((1u << 17) - 1) & ~(IORING_SETUP_SQPOLL | IORING_SETUP_NO_MMAP | \
						     IORING_SETUP_REGISTERED_FD_ONLY))
/* Rings one process may have that the shim follows; more: shm is avoided. */
#define MAX_RINGS	16

/*
 * A ring set up through syscall(): the shim maps its submission queue a
 * second time and, at each io_uring_enter, looks at the entries about to
 * be submitted, before the kernel takes them.
 */
struct ring {
	int fd;			/* -1: free */
	unsigned entries;	/* sq entries, a power of two */
	unsigned sqe_size;	/* 64 or 128 */
	const _Atomic unsigned *head, *tail;
	const unsigned *array;	/* NULL with IORING_SETUP_NO_SQARRAY */
	const uint8_t *sqes;
	void *sq_map, *sqe_map;
	size_t sq_len, sqe_len;
};

static struct ring rings[MAX_RINGS];
static int nrings;
static pthread_mutex_t rings_mu = PTHREAD_MUTEX_INITIALIZER;

static size_t max_sz(size_t a, size_t b)
{
	return a > b ? a : b;
}

/* Map the submission queue of ring fd (params p, as setup returned them): 0 or -errno. */
static int ring_map(struct ring *r, int fd, const struct io_uring_params *p)
{
	const struct io_sqring_offsets *o = &p->sq_off;
	int has_array = !(p->flags & IORING_SETUP_NO_SQARRAY);

	r->entries = p->sq_entries;
	r->sqe_size = p->flags & IORING_SETUP_SQE128 ? 128 : 64;
	r->sq_len = max_sz(max_sz(o->head, o->tail) + sizeof(unsigned),
			   has_array ? o->array + (size_t)p->sq_entries * sizeof(unsigned) : 0);
	r->sqe_len = (size_t)p->sq_entries * r->sqe_size;
	if (!r->entries || (r->entries & (r->entries - 1)))
		return -EINVAL;
	r->sq_map = mmap(NULL, r->sq_len, PROT_READ, MAP_SHARED, fd, IORING_OFF_SQ_RING);
	if (r->sq_map == MAP_FAILED)
		return -errno;
	r->sqe_map = mmap(NULL, r->sqe_len, PROT_READ, MAP_SHARED, fd, IORING_OFF_SQES);
	if (r->sqe_map == MAP_FAILED) {
		munmap(r->sq_map, r->sq_len);
		return -errno;
	}
	r->head = (const _Atomic unsigned *)((uint8_t *)r->sq_map + o->head);
	r->tail = (const _Atomic unsigned *)((uint8_t *)r->sq_map + o->tail);
	r->array = has_array ? (const unsigned *)((uint8_t *)r->sq_map + o->array) : NULL;
	r->sqes = r->sqe_map;
	r->fd = fd;
	return 0;
}

static struct ring *ring_of(int fd)
{
	for (int i = 0; i < nrings; i++)
		if (rings[i].fd == fd)
			return &rings[i];
	return NULL;
}

/* rings_mu held: forget r, unmapping it. */
static void ring_drop(struct ring *r)
{
	munmap(r->sq_map, r->sq_len);
	munmap(r->sqe_map, r->sqe_len);
	*r = rings[--nrings];
}

/* Ring fd is closed: drop the shim's mapping, which would keep the ring alive. */
void ff_ring_closed(int fd)
{
	struct ring *r;

	pthread_mutex_lock(&rings_mu);
	r = ring_of(fd);
	if (r)
		ring_drop(r);
	pthread_mutex_unlock(&rings_mu);
}

static void ring_setup(int fd, const struct io_uring_params *p)
{
	struct ring *r = NULL;
	int err = -ENOSPC;

	if (p->flags & ~RING_FLAGS_READABLE) {
		ff_shm_avoid("io_uring set up with flags the library cannot follow");
		return;
	}
	pthread_mutex_lock(&rings_mu);
	/* A ring at this number before was closed by a route not seen: it is gone. */
	if ((r = ring_of(fd)))
		ring_drop(r);
	if (nrings < MAX_RINGS) {
		r = &rings[nrings];
		err = ring_map(r, fd, p);
		if (!err)
			nrings++;
	}
	pthread_mutex_unlock(&rings_mu);
	if (err) {
		ff_shm_avoid("io_uring the library cannot follow");
		return;
	}
	ff_fd_mark(fd, FF_FD_RING);
}

/* One fd an entry names (not a fixed file): off shm, and decided, before the kernel uses it. */
static void sqe_fd(int fd)
{
	struct ff_slot *s = ff_fd_slot(fd);

	if (s && (atomic_load_explicit(&s->flags, memory_order_relaxed) & FF_FD_TRACKED))
		ff_fd_to_kernel(fd, "used through io_uring");
}

int ff_user_read(void *dst, const void *src, size_t n)
{
	struct iovec to = { .iov_base = dst, .iov_len = n };
	struct iovec from = { .iov_base = (void *)(uintptr_t)src, .iov_len = n };
	ssize_t got = process_vm_readv(getpid(), &to, 1, &from, 1, 0);

	return got == (ssize_t)n ? 0 : got >= 0 ? -EFAULT : -errno;
}

/*
 * ff_user_read of memory the library must see before the kernel uses it; 0,
 * or -1 if it cannot: a bad address is the kernel's to refuse; anything
 * else (a sandbox that denies the read) leaves the library blind, so the
 * process leaves shm (what says why).
 */
static int must_read(void *dst, const void *src, size_t n, const char *what)
{
	int err = ff_user_read(dst, src, n);

	if (err && err != -EFAULT)
		ff_shm_avoid(what);
	return err ? -1 : 0;
}

/*
 * fds (n of them; -1 and IORING_REGISTER_FILES_SKIP name none) become
 * fixed files, which entries name by index: the shim cannot tell which
 * entry uses which, so each gets now what an entry naming it would get,
 * and a listener is withdrawn as for an ACCEPT. A socket not yet
 * listening or connected stays on the overlay: the ring keeps the file it
 * was given, which a swap would replace at the number only.
 */
#define FILES_CHUNK	256	/* fds read at a time */

static void fixed_files(const int *fds, unsigned n)
{
	int chunk[FILES_CHUNK];

	if (!fds)
		return;
	for (unsigned at = 0; at < n; at += FILES_CHUNK) {
		unsigned k = n - at < FILES_CHUNK ? n - at : FILES_CHUNK;

		if (must_read(chunk, fds + at, k * sizeof(int), "io_uring fixed files that could not be read"))
			return;
		for (unsigned i = 0; i < k; i++) {
			ff_listener_withdraw(chunk[i], "given to io_uring as a fixed file");
			sqe_fd(chunk[i]);
		}
	}
}

/* IORING_OP_SENDMSG(_ZC)'s msghdr at addr: fds it passes leave shm first. */
static void sqe_sendmsg(const void *addr)
{
	uint8_t control[4096];	/* more than the kernel lets a message carry fds in */
	struct msghdr mh;

	if (!addr || must_read(&mh, addr, sizeof(mh), "an io_uring sendmsg header that could not be read") ||
	    !mh.msg_controllen)
		return;
	if (mh.msg_controllen > sizeof(control)) {
		ff_shm_avoid("an io_uring sendmsg with more control data than the library reads");
		return;
	}
	if (must_read(control, mh.msg_control, mh.msg_controllen,
		      "io_uring sendmsg control data that could not be read"))
		return;
	mh.msg_control = control;
	ff_shm_switch_passed(&mh);
}

/* IORING_OP_CLOSE of fd: as close(), the kernel closing it after. */
static void sqe_close(int fd)
{
	struct ff_slot *s = ff_fd_slot(fd);
	struct ff_conn *c;

	/* The kernel refuses to close a ring through io_uring: no FF_FD_RING here. */
	if (!s || !(atomic_load(&s->flags) & ~FF_FD_RING))
		return;
	ff_fd_to_kernel(fd, "closed through io_uring");
	ff_table_lock();
	c = ff_fd_forget(fd);
	ff_table_unlock();
	ff_conn_closed(c);
}

static void sqe_check(const struct io_uring_sqe *e)
{
	uint8_t op = e->opcode;
	int fixed = e->flags & IOSQE_FIXED_FILE;

	if (op == IORING_OP_FILES_UPDATE) {
		fixed_files((const int *)(uintptr_t)e->addr, e->len);
		return;
	}
	if (op == IORING_OP_CLOSE) {
		if (!e->file_index)
			sqe_close(e->fd);
		return;
	}
	/* Single or multishot (ioprio): what it accepts the shim never sees. */
	if (op == IORING_OP_ACCEPT) {
		if (!fixed)
			ff_listener_withdraw(e->fd, "it accepts through io_uring");
		return;
	}
	if (!fixed)
		sqe_fd(e->fd);
	if ((op == IORING_OP_SPLICE || op == IORING_OP_TEE) &&
	    !(e->splice_flags & SPLICE_F_FD_IN_FIXED))
		sqe_fd(e->splice_fd_in);
	if (op == IORING_OP_EPOLL_CTL)
		sqe_fd((int)e->off);
	if (op == IORING_OP_SENDMSG || op == IORING_OP_SENDMSG_ZC)
		sqe_sendmsg((const void *)(uintptr_t)e->addr);
}

/*
 * io_uring_enter on ring fd: every entry between the kernel's head and
 * the program's tail is looked at before the kernel takes it. An enter on
 * a ring the shim does not know (set up before exec, by inline system
 * calls, a registered ring index) leaves shm for good.
 */
static void ring_enter(int fd, unsigned flags)
{
	struct ring *r;

	if (flags & IORING_ENTER_REGISTERED_RING) {
		ff_shm_avoid("io_uring entered through a registered ring index");
		return;
	}
	pthread_mutex_lock(&rings_mu);
	r = ring_of(fd);
	if (r) {
		unsigned head = atomic_load_explicit(r->head, memory_order_acquire);
		unsigned tail = atomic_load_explicit(r->tail, memory_order_acquire);
		unsigned n = tail - head < r->entries ? tail - head : r->entries;

		for (unsigned i = 0; i < n; i++) {
			unsigned at = (head + i) & (r->entries - 1);
			unsigned idx = r->array ? r->array[at] : at;

			if (idx < r->entries)
				sqe_check((const void *)(r->sqes + (size_t)idx * r->sqe_size));
		}
	}
	pthread_mutex_unlock(&rings_mu);
	if (!r)
		ff_shm_avoid("io_uring_enter on a ring the library did not see set up");
}

/*
 * io_uring_register(op, arg, nr): fds that become fixed files are seen to
 * first. The argument is read as the kernel reads it, only in the sizes it
 * accepts.
 */
static void ring_register(unsigned op, const void *arg, unsigned nr)
{
	struct io_uring_rsrc_register reg;
	struct io_uring_rsrc_update2 up2;
	struct io_uring_files_update up;
	const char *why = "an io_uring_register argument that could not be read";

	if (!arg)
		return;
	switch (op & ~IORING_REGISTER_USE_REGISTERED_RING) {
	case IORING_REGISTER_FILES:
		fixed_files(arg, nr);
		break;
	case IORING_REGISTER_FILES2:
		if (nr != sizeof(reg))
			break;
		if (!must_read(&reg, arg, sizeof(reg), why) && !(reg.flags & IORING_RSRC_REGISTER_SPARSE))
			fixed_files((const int *)(uintptr_t)reg.data, reg.nr);
		break;
	case IORING_REGISTER_FILES_UPDATE:
		if (!must_read(&up, arg, sizeof(up), why))
			fixed_files((const int *)(uintptr_t)up.fds, nr);
		break;
	case IORING_REGISTER_FILES_UPDATE2:
		if (nr != sizeof(up2))
			break;
		if (!must_read(&up2, arg, sizeof(up2), why))
			fixed_files((const int *)(uintptr_t)up2.data, up2.nr);
		break;
	}
}

/*
 * liburing makes its own system calls (inline, not through syscall()), so
 * the shim cannot see what its rings submit: a process that sets one up
 * avoids shm. Only reached when liburing is a shared library.
 */
#define LIBURING_INIT(name, params, args)					\
FF_EXPORT int name params							\
{										\
	int (*real) params = (int (*) params)dlsym(RTLD_NEXT, #name);		\
										\
	if (!real)								\
		return -ENOSYS;							\
	ff_init();	/* it may be the program's first call we see */		\
	ff_shm_avoid("liburing " #name);					\
	return real args;							\
}

struct io_uring;
LIBURING_INIT(io_uring_queue_init, (unsigned entries, struct io_uring *ring, unsigned flags),
	      (entries, ring, flags))
LIBURING_INIT(io_uring_queue_init_params,
	      (unsigned entries, struct io_uring *ring, struct io_uring_params *p),
	      (entries, ring, p))
LIBURING_INIT(io_uring_queue_init_mem,
	      (unsigned entries, struct io_uring *ring, struct io_uring_params *p, void *buf,
	       size_t size),
	      (entries, ring, p, buf, size))
LIBURING_INIT(io_uring_setup, (unsigned entries, struct io_uring_params *p), (entries, p))

/* ---- syscall() ---- */

typedef long (*syscall_fn)(long, ...);

/*
 * libc's syscall(), resolved on first use without ff_init: syscall() is
 * called for futexes by allocators and runtimes, also from inside
 * start-up, so a number the shim does not handle must not wait for it.
 */
static syscall_fn libc_syscall(void)
{
	static _Atomic(syscall_fn) fn;
	syscall_fn f = atomic_load_explicit(&fn, memory_order_acquire);

	if (!f) {
		f = (syscall_fn)dlsym(RTLD_NEXT, "syscall");
		atomic_store_explicit(&fn, f, memory_order_release);
	}
	return f;
}

/* The kernel's sigset size for ppoll/epoll_pwait/pselect6: what libc passes. */
#define KSIGSET	(_NSIG / 8)

/* pselect6's sixth argument. */
struct pselect_sig {
	const sigset_t *ss;
	size_t len;
};

/* A process copy (fork, clone without CLONE_THREAD): shm is never shared (fork.c). */
static void before_copy(unsigned long flags)
{
	if (!(flags & CLONE_THREAD))
		ff_shm_switch_all(0);
}

/*
 * A number whose libc function the shim wraps goes to that wrapper, so
 * the call does what the plain call would; 1 with *ret set, or 0 for the
 * kernel. The arguments are the longs syscall() was given: each is cast
 * back to its type, as the kernel does with the registers.
 */
static int route(long n, const long *a, long *ret)
{
	int fd = (int)a[0];

	switch (n) {
	case SYS_close:		*ret = close(fd); return 1;
	case SYS_close_range:	*ret = close_range((unsigned)a[0], (unsigned)a[1], (int)a[2]); return 1;
	case SYS_dup:		*ret = dup(fd); return 1;
#ifdef SYS_dup2
	case SYS_dup2:		*ret = dup2(fd, (int)a[1]); return 1;
#endif
	case SYS_dup3:		*ret = dup3(fd, (int)a[1], (int)a[2]); return 1;
	case SYS_fcntl:		*ret = fcntl(fd, (int)a[1], a[2]); return 1;
	case SYS_ioctl:		*ret = ioctl(fd, (unsigned long)a[1], a[2]); return 1;
	case SYS_read:		*ret = read(fd, (void *)a[1], (size_t)a[2]); return 1;
	case SYS_write:		*ret = write(fd, (const void *)a[1], (size_t)a[2]); return 1;
	case SYS_readv:		*ret = readv(fd, (const void *)a[1], (int)a[2]); return 1;
	case SYS_writev:	*ret = writev(fd, (const void *)a[1], (int)a[2]); return 1;
	case SYS_preadv2:
		/* The kernel takes the offset in two halves; 64-bit ABIs use the first. */
		*ret = preadv2(fd, (const void *)a[1], (int)a[2], (off_t)a[3], (int)a[5]);
		return 1;
	case SYS_pwritev2:
		*ret = pwritev2(fd, (const void *)a[1], (int)a[2], (off_t)a[3], (int)a[5]);
		return 1;
	case SYS_recvfrom:
		*ret = recvfrom(fd, (void *)a[1], (size_t)a[2], (int)a[3], (void *)a[4],
				(socklen_t *)a[5]);
		return 1;
	case SYS_sendto:
		*ret = sendto(fd, (const void *)a[1], (size_t)a[2], (int)a[3],
			      (const void *)a[4], (socklen_t)a[5]);
		return 1;
	case SYS_recvmsg:	*ret = recvmsg(fd, (void *)a[1], (int)a[2]); return 1;
	case SYS_sendmsg:	*ret = sendmsg(fd, (const void *)a[1], (int)a[2]); return 1;
	case SYS_recvmmsg:
		*ret = recvmmsg(fd, (void *)a[1], (unsigned)a[2], (int)a[3], (void *)a[4]);
		return 1;
	case SYS_sendmmsg:	*ret = sendmmsg(fd, (void *)a[1], (unsigned)a[2], (int)a[3]); return 1;
	case SYS_sendfile:
		*ret = sendfile(fd, (int)a[1], (off_t *)a[2], (size_t)a[3]);
		return 1;
	case SYS_splice:
		*ret = splice(fd, (loff_t *)a[1], (int)a[2], (loff_t *)a[3], (size_t)a[4],
			      (unsigned)a[5]);
		return 1;
	case SYS_shutdown:	*ret = shutdown(fd, (int)a[1]); return 1;
	case SYS_socket:	*ret = socket(fd, (int)a[1], (int)a[2]); return 1;
	case SYS_connect:	*ret = connect(fd, (const void *)a[1], (socklen_t)a[2]); return 1;
	case SYS_listen:	*ret = listen(fd, (int)a[1]); return 1;
	case SYS_accept:	*ret = accept(fd, (void *)a[1], (socklen_t *)a[2]); return 1;
	case SYS_accept4:	*ret = accept4(fd, (void *)a[1], (socklen_t *)a[2], (int)a[3]); return 1;
	case SYS_getsockname:	*ret = getsockname(fd, (void *)a[1], (socklen_t *)a[2]); return 1;
	case SYS_getpeername:	*ret = getpeername(fd, (void *)a[1], (socklen_t *)a[2]); return 1;
	case SYS_getsockopt:
		*ret = getsockopt(fd, (int)a[1], (int)a[2], (void *)a[3], (socklen_t *)a[4]);
		return 1;
	case SYS_setsockopt:
		*ret = setsockopt(fd, (int)a[1], (int)a[2], (const void *)a[3], (socklen_t)a[4]);
		return 1;
#ifdef SYS_poll
	case SYS_poll:		*ret = poll((void *)a[0], (nfds_t)a[1], (int)a[2]); return 1;
#endif
	case SYS_ppoll:
		if (a[3] && a[4] != KSIGSET)
			return 0;	/* the kernel says EINVAL */
		*ret = ppoll((void *)a[0], (nfds_t)a[1], (const void *)a[2], (const void *)a[3]);
		return 1;
#ifdef SYS_select
	case SYS_select:
		*ret = select(fd, (void *)a[1], (void *)a[2], (void *)a[3], (void *)a[4]);
		return 1;
#endif
	case SYS_pselect6: {
		const struct pselect_sig *sig = (const void *)a[5];

		if (sig && sig->ss && sig->len != KSIGSET)
			return 0;
		*ret = pselect(fd, (void *)a[1], (void *)a[2], (void *)a[3], (const void *)a[4],
			       sig ? sig->ss : NULL);
		return 1;
	}
#ifdef SYS_epoll_create
	case SYS_epoll_create:	*ret = epoll_create(fd); return 1;
#endif
	case SYS_epoll_create1:	*ret = epoll_create1(fd); return 1;
	case SYS_epoll_ctl:	*ret = epoll_ctl(fd, (int)a[1], (int)a[2], (void *)a[3]); return 1;
#ifdef SYS_epoll_wait
	case SYS_epoll_wait:	*ret = epoll_wait(fd, (void *)a[1], (int)a[2], (int)a[3]); return 1;
#endif
	case SYS_epoll_pwait:
		if (a[4] && a[5] != KSIGSET)
			return 0;
		*ret = epoll_pwait(fd, (void *)a[1], (int)a[2], (int)a[3], (const void *)a[4]);
		return 1;
	case SYS_epoll_pwait2:
		if (a[4] && a[5] != KSIGSET)
			return 0;
		*ret = epoll_pwait2(fd, (void *)a[1], (int)a[2], (const void *)a[3],
				    (const void *)a[4]);
		return 1;
	case SYS_execve:
		*ret = execve((const char *)a[0], (char *const *)a[1], (char *const *)a[2]);
		return 1;
	/* What has no wrapper of its own: the same care, then the kernel. */
	case SYS_execveat:	ff_shm_switch_all(FF_SHM_SWITCH_KEPT); return 0;
#ifdef SYS_fork
	case SYS_fork:
#endif
#ifdef SYS_vfork
	case SYS_vfork:
#endif
		ff_shm_switch_all(0);
		return 0;
	case SYS_clone:		before_copy((unsigned long)a[0]); return 0;
	case SYS_clone3: {
		uint64_t flags = 0;	/* clone_args.flags, its first field; unread: a process copy */

		if (!a[0] || ff_user_read(&flags, (const void *)a[0], sizeof(flags)) == -EFAULT)
			return 0;	/* the kernel refuses it (EINVAL, EFAULT): nothing copied */
		before_copy((unsigned long)flags);
		return 0;
	}
	case SYS_io_uring_enter:
		if ((unsigned)a[1])	/* something to submit */
			ring_enter(fd, (unsigned)a[3]);
		return 0;
	case SYS_io_uring_register:
		ring_register((unsigned)a[1], (const void *)a[2], (unsigned)a[3]);
		return 0;
	}
	return 0;
}

FF_EXPORT long syscall(long n, ...)
{
	syscall_fn real = libc_syscall();
	va_list ap;
	long a[6], ret;

	/* As libc's own syscall(): six argument registers, whatever the number uses. */
	va_start(ap, n);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	if (!ff_busy && ff_ready() && route(n, a, &ret))
		return ret;
	if (!real) {
		errno = ENOSYS;
		return -1;
	}
	ret = real(n, a[0], a[1], a[2], a[3], a[4], a[5]);
	if (n == SYS_io_uring_setup && ret >= 0 && !ff_busy && a[1]) {
		ff_init();	/* a ring made before the first wrapped call is watched too */
		ring_setup((int)ret, (const struct io_uring_params *)a[1]);
	}
	return ret;
}
