/* SPDX-License-Identifier: MIT */
/*
 * The data path. After a swap onto a kernel channel the fd is a kernel
 * stream socket, so these wrappers do nothing but hold back a call on a
 * connection whose decision is still pending (non-blocking connect): no
 * byte may cross the overlay TCP connection before the agent has decided.
 * On a shared-memory connection (FF_FD_SHM) the bytes move through the
 * rings instead (shm/io.c). For every other fd the cost is one relaxed load of
 * the fd's slot.
 *
 * A call that cannot block (MSG_DONTWAIT) on a connection still in
 * SYN_SENT fails with EAGAIN, as the kernel itself would answer.
 *
 * Addresses: Linux TCP ignores the destination of sendto/sendmsg on a
 * connected socket and reports no source address from recvfrom/recvmsg
 * (the length comes back 0, the buffer untouched). An AF_UNIX stream
 * socket refuses a destination (EISCONN) and reports its peer's AF_UNIX
 * name, so on a swapped fd the calls that carry an address go to the
 * kernel without it and report a zero length, as TCP would. Only calls
 * that carry an address pay for the check: one more load of the fd's slot.
 *
 * An shm connection is never shared with another process (docs/SHM.md,
 * "Moving down"): sendmsg passing one with SCM_RIGHTS, and splice, which
 * needs a kernel socket, move it down first.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/sendfile.h>
#include <time.h>

#include "agent/agent.h"
#include "calls/calls.h"
#include "core/core.h"
#include "proc/proc.h"
#include "setup/setup.h"
#include "shm/shm.h"

/* mmsghdr entries rewritten per call on a swapped fd (4 KiB of stack). */
#define MMSG_CHUNK	64

/*
 * Where a data call on fd goes, once its decision is made: 0 the kernel,
 * 1 shm, or -errno the call fails with.
 */
static int route(int fd, int nonblock, int writes, struct ff_entered *e)
{
	struct ff_slot *s;
	unsigned fl;
	int hold;

	if (ff_busy || !(s = ff_slot_enter(fd)))
		return 0;
	/*
	 * Relaxed is enough: a call racing with the connect() or the swap in
	 * another thread has no order to respect, and slow paths re-check
	 * under the table lock.
	 */
	fl = atomic_load_explicit(&s->flags, memory_order_relaxed);
	if (fl & FF_FD_SWAPPED)
		ff_ledger_inherited();
	if (fl & FF_FD_PENDING) {
		hold = ff_settle_slow(fd, nonblock);
		if (hold)
			return hold;
		fl = atomic_load_explicit(&s->flags, memory_order_relaxed);
	}
	if (fl & FF_FD_MOVED)
		return ff_moved_enter(fd, writes, e);
	return (fl & FF_FD_SHM) != 0;
}

/* The result of an shm call for the program: errno as it was unless it failed. */
static ssize_t shm_result(ssize_t r, int saved)
{
	if (r < 0 && r != FF_SHM_MOVED) {
		errno = (int)-r;
		return -1;
	}
	errno = saved;
	return r;
}

/*
 * Route fd: fail, or make the shm call (unless the connection moved off
 * shm meanwhile: then route it again, and fall through to the kernel call
 * that follows). The wrapper declares FF_ENTERED first: a call on a socket
 * pair that may go back to shm is counted until the wrapper returns
 * (shm/resume.c), also one that got there from shm during the call.
 */
#define ROUTE(fd, nonblock, writes, shm_call) do {			\
	int route_;							\
	while ((route_ = route((fd), (nonblock), (writes), &ff_entered_))) { \
		int errno_ = errno;					\
		ssize_t ret_;						\
		if (route_ < 0) {					\
			errno = -route_;				\
			return -1;					\
		}							\
		ret_ = shm_result((shm_call), errno_);			\
		if (ret_ != FF_SHM_MOVED)				\
			return ret_;					\
	}								\
} while (0)
/* A call that reads from fd, or writes to it (or shuts it down). */
#define ROUTE_IN(fd, nonblock, shm_call)	ROUTE(fd, nonblock, 0, shm_call)
#define ROUTE_OUT(fd, nonblock, shm_call)	ROUTE(fd, nonblock, 1, shm_call)

/* Whether fd is a swapped connection (its decision made: call after ROUTE). */
static int swapped(int fd)
{
	struct ff_slot *s = ff_fd_slot(fd);

	return s && (atomic_load_explicit(&s->flags, memory_order_relaxed) & FF_FD_SWAPPED);
}

/* As TCP: an address buffer the caller gave is left alone, its length set to 0. */
static void no_source(socklen_t *len)
{
	if (len)
		*len = 0;
}

/* recvfrom on shm: no source address, as TCP. */
static ssize_t shm_recvfrom(int fd, void *buf, size_t n, int flags, socklen_t *len)
{
	struct iovec v = { buf, n };
	ssize_t r = ff_shm_recv(fd, &v, 1, flags);

	if (r >= 0)
		no_source(len);
	return r;
}

/* recvmsg on shm: TCP reports no address and no control data. */
static ssize_t shm_recvmsg(int fd, struct msghdr *mh, int flags)
{
	ssize_t r;

	if (mh->msg_iovlen > IOV_MAX)
		return -EMSGSIZE;
	r = ff_shm_recv(fd, mh->msg_iov, (int)mh->msg_iovlen, flags);
	if (r >= 0) {
		mh->msg_namelen = 0;
		mh->msg_controllen = 0;
		mh->msg_flags = 0;
	}
	return r;
}

/* sendmsg on shm: an address is ignored as TCP does, and so is control data. */
static ssize_t shm_sendmsg(int fd, const struct msghdr *mh, int flags)
{
	if (mh->msg_iovlen > IOV_MAX)
		return -EMSGSIZE;
	return ff_shm_send(fd, mh->msg_iov, (int)mh->msg_iovlen, flags);
}

FF_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
	FF_ENTERED;
	struct iovec v = { buf, n };

	ROUTE_IN(fd, 0, ff_shm_recv(fd, &v, 1, 0));
	return REAL(read)(fd, buf, n);
}

/* Whether fd is marked as one of kind (FF_FD_UVERBS, FF_FD_RDMACM; call after ROUTE). */
static int marked(int fd, uint16_t kind)
{
	struct ff_slot *s = ff_fd_slot(fd);

	return !ff_busy && s && (atomic_load_explicit(&s->flags, memory_order_relaxed) & kind);
}

FF_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
	FF_ENTERED;
	struct iovec v = { (void *)buf, n };
	ssize_t r;

	ROUTE_OUT(fd, 0, ff_shm_send(fd, &v, 1, 0));
	if ((marked(fd, FF_FD_UVERBS) && (r = ff_uverbs_write(buf, n))) ||
	    (marked(fd, FF_FD_RDMACM) && (r = ff_rdmacm_write(fd, buf, n)))) {
		if (r > 0)
			return r;
		errno = (int)-r;
		return -1;
	}
	return REAL(write)(fd, buf, n);
}

FF_EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
	FF_ENTERED;
	ROUTE_IN(fd, 0, ff_shm_recv(fd, iov, cnt, 0));
	return REAL(readv)(fd, iov, cnt);
}

FF_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	FF_ENTERED;
	ROUTE_OUT(fd, 0, ff_shm_send(fd, iov, cnt, 0));
	return REAL(writev)(fd, iov, cnt);
}

FF_EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	FF_ENTERED;
	struct iovec v = { buf, n };

	ROUTE_IN(fd, flags & MSG_DONTWAIT, ff_shm_recv(fd, &v, 1, flags));
	return REAL(recv)(fd, buf, n, flags);
}

FF_EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
	FF_ENTERED;
	struct iovec v = { (void *)buf, n };

	ROUTE_OUT(fd, flags & MSG_DONTWAIT, ff_shm_send(fd, &v, 1, flags));
	return REAL(send)(fd, buf, n, flags);
}

FF_EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags,
			   struct sockaddr *sa, socklen_t *len)
{
	FF_ENTERED;
	ssize_t ret;

	ROUTE_IN(fd, flags & MSG_DONTWAIT, shm_recvfrom(fd, buf, n, flags, len));
	if (!sa || !len || !swapped(fd))
		return REAL(recvfrom)(fd, buf, n, flags, sa, len);
	ret = ff_real.recvfrom(fd, buf, n, flags, NULL, NULL);
	if (ret >= 0)
		no_source(len);
	return ret;
}

FF_EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags,
			 const struct sockaddr *sa, socklen_t len)
{
	FF_ENTERED;
	struct iovec v = { (void *)buf, n };

	ROUTE_OUT(fd, flags & MSG_DONTWAIT, ff_shm_send(fd, &v, 1, flags));
	if ((sa || len) && swapped(fd))
		return ff_real.sendto(fd, buf, n, flags, NULL, 0);
	return REAL(sendto)(fd, buf, n, flags, sa, len);
}

FF_EXPORT ssize_t recvmsg(int fd, struct msghdr *mh, int flags)
{
	FF_ENTERED;
	struct msghdr m;
	ssize_t ret;

	ROUTE_IN(fd, flags & MSG_DONTWAIT, mh ? shm_recvmsg(fd, mh, flags) : -EFAULT);
	if (!mh || !mh->msg_name || !swapped(fd))
		return REAL(recvmsg)(fd, mh, flags);
	m = *mh;
	m.msg_name = NULL;
	m.msg_namelen = 0;
	ret = ff_real.recvmsg(fd, &m, flags);
	if (ret >= 0) {
		mh->msg_namelen = 0;
		mh->msg_controllen = m.msg_controllen;
		mh->msg_flags = m.msg_flags;
	}
	return ret;
}

/* Before a message that may pass fds leaves: an shm connection it passes moves down first. */
static void passing(const struct msghdr *mh)
{
	if (!mh || !mh->msg_controllen || ff_busy)
		return;
	ff_init();	/* shm/switch.c reads the fd table */
	ff_shm_switch_passed(mh);
}

FF_EXPORT ssize_t sendmsg(int fd, const struct msghdr *mh, int flags)
{
	FF_ENTERED;
	struct msghdr m;

	passing(mh);
	ROUTE_OUT(fd, flags & MSG_DONTWAIT, mh ? shm_sendmsg(fd, mh, flags) : -EFAULT);
	if (!mh || (!mh->msg_name && !mh->msg_namelen) || !swapped(fd))
		return REAL(sendmsg)(fd, mh, flags);
	m = *mh;
	m.msg_name = NULL;
	m.msg_namelen = 0;
	return ff_real.sendmsg(fd, &m, flags);
}

/*
 * sendfile with in_fd on shm (to any out_fd): peek, write to out_fd, then
 * take exactly what it took: nothing is lost when out_fd takes less or
 * fails. The write wrapper by name, on purpose: out_fd may itself be on
 * shm or wait for its decision.
 */
static ssize_t shm_sendfile_from(int out_fd, int in_fd, off_t *off, size_t n)
{
	uint8_t buf[16384];
	struct iovec v = { buf, n < sizeof(buf) ? n : sizeof(buf) };
	ssize_t got, w;

	if (off)
		return -ESPIPE;		/* a socket has no file offset */
	got = ff_shm_recv(in_fd, &v, 1, MSG_PEEK);
	if (got <= 0)
		return got;
	w = write(out_fd, buf, (size_t)got);
	if (w < 0)
		return -errno;
	v = (struct iovec){ NULL, (size_t)w };
	if (ff_shm_recv(in_fd, &v, 1, MSG_TRUNC | MSG_DONTWAIT) == FF_SHM_MOVED)
		/* Moved down since the peek: the same bytes are first in the kernel socket now. */
		ff_real.recv(in_fd, buf, (size_t)w, MSG_WAITALL);
	return w;
}

/* From an shm connection the kernel would read the bell socket: the shim reads the ring. */
FF_EXPORT ssize_t sendfile(int out, int in, off_t *off, size_t n)
{
	FF_ENTERED;
	ROUTE_IN(in, 0, shm_sendfile_from(out, in, off, n));
	ROUTE_OUT(out, 0, ff_shm_sendfile(out, in, off, n));
	return REAL(sendfile)(out, in, off, n);
}

/* recvmmsg on shm: one receive per entry, by the rules of the kernel's loop. */
static ssize_t shm_recvmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags,
			    struct timespec *timeout)
{
	struct timespec now, end = { 0 };
	unsigned int i = 0;
	ssize_t r = 0;

	if (timeout) {
		if (timeout->tv_sec < 0 || timeout->tv_nsec < 0 || timeout->tv_nsec >= 1000000000L)
			return -EINVAL;
		clock_gettime(CLOCK_MONOTONIC, &end);
		end.tv_sec += timeout->tv_sec;
		end.tv_nsec += timeout->tv_nsec;
		if (end.tv_nsec >= 1000000000L) {
			end.tv_sec++;
			end.tv_nsec -= 1000000000L;
		}
	}
	while (i < n) {
		r = shm_recvmsg(fd, &v[i].msg_hdr, flags & ~MSG_WAITFORONE);
		if (r < 0)
			break;
		v[i++].msg_len = (unsigned int)r;
		if (flags & MSG_WAITFORONE)
			flags |= MSG_DONTWAIT;
		if (!timeout)
			continue;
		/* As the kernel: the time left is written back, checked after each message. */
		clock_gettime(CLOCK_MONOTONIC, &now);
		timeout->tv_sec = end.tv_sec - now.tv_sec;
		timeout->tv_nsec = end.tv_nsec - now.tv_nsec;
		if (timeout->tv_nsec < 0) {
			timeout->tv_sec--;
			timeout->tv_nsec += 1000000000L;
		}
		if (timeout->tv_sec < 0) {
			*timeout = (struct timespec){ 0 };
			break;
		}
	}
	return i ? (ssize_t)i : r;
}

/* sendmmsg on shm: one send per entry until one fails, as the kernel's loop. */
static ssize_t shm_sendmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags)
{
	unsigned int i = 0;
	ssize_t r = 0;

	while (i < n) {
		r = shm_sendmsg(fd, &v[i].msg_hdr, flags);
		if (r < 0)
			break;
		v[i++].msg_len = (unsigned int)r;
	}
	return i ? (ssize_t)i : r;
}

static int any_name(const struct mmsghdr *v, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++)
		if (v[i].msg_hdr.msg_name || v[i].msg_hdr.msg_namelen)
			return 1;
	return 0;
}

/* Copies of up to MMSG_CHUNK entries of v without their addresses. */
static unsigned int strip_names(struct mmsghdr *out, const struct mmsghdr *v, unsigned int n)
{
	if (n > MMSG_CHUNK)
		n = MMSG_CHUNK;
	memcpy(out, v, n * sizeof(*v));
	for (unsigned int i = 0; i < n; i++) {
		out[i].msg_hdr.msg_name = NULL;
		out[i].msg_hdr.msg_namelen = 0;
	}
	return n;
}

/*
 * On a swapped fd with addresses: one chunk of at most MMSG_CHUNK entries.
 * Receiving fewer messages than asked is what recvmmsg may always do (its
 * timeout, MSG_WAITFORONE), so one kernel call keeps those semantics.
 */
FF_EXPORT int recvmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags,
		       struct timespec *timeout)
{
	FF_ENTERED;
	struct mmsghdr m[MMSG_CHUNK];
	int ret;

	ROUTE_IN(fd, flags & MSG_DONTWAIT, v ? shm_recvmmsg(fd, v, n, flags, timeout) : -EFAULT);
	if (!v || !any_name(v, n) || !swapped(fd))
		return REAL(recvmmsg)(fd, v, n, flags, timeout);
	ret = ff_real.recvmmsg(fd, m, strip_names(m, v, n), flags, timeout);
	for (int i = 0; i < ret; i++) {
		v[i].msg_len = m[i].msg_len;
		v[i].msg_hdr.msg_namelen = 0;
		v[i].msg_hdr.msg_controllen = m[i].msg_hdr.msg_controllen;
		v[i].msg_hdr.msg_flags = m[i].msg_hdr.msg_flags;
	}
	return ret;
}

/* Chunks until all are sent or one falls short, as the kernel's own loop. */
FF_EXPORT int sendmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags)
{
	FF_ENTERED;
	struct mmsghdr m[MMSG_CHUNK];
	unsigned int done = 0;

	for (unsigned int i = 0; v && i < n; i++)
		passing(&v[i].msg_hdr);
	ROUTE_OUT(fd, flags & MSG_DONTWAIT, v ? shm_sendmmsg(fd, v, n, flags) : -EFAULT);
	if (!v || !any_name(v, n) || !swapped(fd))
		return REAL(sendmmsg)(fd, v, n, flags);
	while (done < n) {
		unsigned int k = strip_names(m, v + done, n - done);
		int ret = ff_real.sendmmsg(fd, m, k, flags);

		if (ret < 0)
			return done ? (int)done : ret;
		for (int i = 0; i < ret; i++)
			v[done + (unsigned int)i].msg_len = m[i].msg_len;
		done += (unsigned int)ret;
		if ((unsigned int)ret < k)
			break;
	}
	return (int)done;
}

/* splice needs a kernel socket: an shm connection is moved down first. 0 or -errno. */
static int kernel_socket(int fd, int nonblock, int writes, struct ff_entered *e)
{
	int r = route(fd, nonblock, writes, e);

	if (r <= 0)
		return r;
	if (ff_shm_switch(fd) < 0)
		return -ECONNRESET;
	/* Moved down: counted now, as any call on the pair. */
	r = route(fd, nonblock, writes, e);
	return r < 0 ? r : 0;
}

/* SPLICE_F_NONBLOCK makes the socket side non-blocking too (sock_splice_read). */
FF_EXPORT ssize_t splice(int in, loff_t *off_in, int out, loff_t *off_out, size_t n,
			 unsigned int flags)
{
	FF_ENTERED;
	int r = kernel_socket(in, flags & SPLICE_F_NONBLOCK, 0, &ff_entered_);

	if (!r)
		r = kernel_socket(out, flags & SPLICE_F_NONBLOCK, 1, &ff_entered_);
	if (r) {
		errno = -r;
		return -1;
	}
	return REAL(splice)(in, off_in, out, off_out, n, flags);
}

/* glibc's LFS name; off_t is 64 bits on every ABI the shim supports. */
FF_EXPORT ssize_t sendfile64(int out, int in, off_t *off, size_t n)
{
	return sendfile(out, in, off, n);
}

/* _FORTIFY_SOURCE builds (Debian's default) call these instead. */
/* n over buflen: libc's own aborts, as it should. */
FF_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
	FF_ENTERED;
	struct iovec v = { buf, n };

	if (n <= buflen)
		ROUTE_IN(fd, 0, ff_shm_recv(fd, &v, 1, 0));
	return REAL(read_chk)(fd, buf, n, buflen);
}

FF_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
	FF_ENTERED;
	struct iovec v = { buf, n };

	if (n <= buflen)
		ROUTE_IN(fd, flags & MSG_DONTWAIT, ff_shm_recv(fd, &v, 1, flags));
	return REAL(recv_chk)(fd, buf, n, buflen, flags);
}

FF_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen,
				 int flags, struct sockaddr *sa, socklen_t *len)
{
	FF_ENTERED;
	ssize_t ret;

	if (n <= buflen)
		ROUTE_IN(fd, flags & MSG_DONTWAIT, shm_recvfrom(fd, buf, n, flags, len));
	if (!sa || !len || !swapped(fd))
		return REAL(recvfrom_chk)(fd, buf, n, buflen, flags, sa, len);
	ret = ff_real.recvfrom_chk(fd, buf, n, buflen, flags, NULL, NULL);
	if (ret >= 0)
		no_source(len);
	return ret;
}
