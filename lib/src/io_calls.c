/* SPDX-License-Identifier: MIT */
/*
 * The data path. After a swap the fd is a kernel stream socket, so these
 * wrappers do nothing but hold back a call on a connection whose decision is
 * still pending (non-blocking connect): no byte may cross the overlay TCP
 * connection before the agent has decided. For every other fd the cost is
 * ff_settle()'s one relaxed load.
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
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/sendfile.h>

#include "shim.h"

/* mmsghdr entries rewritten per call on a swapped fd (4 KiB of stack). */
#define MMSG_CHUNK	64

#define HOLD(fd, nonblock) do {						\
	int hold_ = ff_busy ? 0 : ff_settle((fd), (nonblock));		\
	if (hold_) {							\
		errno = -hold_;						\
		return -1;						\
	}								\
} while (0)

/* Whether fd is a swapped connection (its decision made: call after HOLD). */
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

FF_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
	HOLD(fd, 0);
	return REAL(read)(fd, buf, n);
}

FF_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
	HOLD(fd, 0);
	return REAL(write)(fd, buf, n);
}

FF_EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
	HOLD(fd, 0);
	return REAL(readv)(fd, iov, cnt);
}

FF_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	HOLD(fd, 0);
	return REAL(writev)(fd, iov, cnt);
}

FF_EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
	HOLD(fd, flags & MSG_DONTWAIT);
	return REAL(recv)(fd, buf, n, flags);
}

FF_EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
	HOLD(fd, flags & MSG_DONTWAIT);
	return REAL(send)(fd, buf, n, flags);
}

FF_EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags,
			   struct sockaddr *sa, socklen_t *len)
{
	ssize_t ret;

	HOLD(fd, flags & MSG_DONTWAIT);
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
	HOLD(fd, flags & MSG_DONTWAIT);
	if ((sa || len) && swapped(fd))
		return ff_real.sendto(fd, buf, n, flags, NULL, 0);
	return REAL(sendto)(fd, buf, n, flags, sa, len);
}

FF_EXPORT ssize_t recvmsg(int fd, struct msghdr *mh, int flags)
{
	struct msghdr m;
	ssize_t ret;

	HOLD(fd, flags & MSG_DONTWAIT);
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

FF_EXPORT ssize_t sendmsg(int fd, const struct msghdr *mh, int flags)
{
	struct msghdr m;

	HOLD(fd, flags & MSG_DONTWAIT);
	if (!mh || (!mh->msg_name && !mh->msg_namelen) || !swapped(fd))
		return REAL(sendmsg)(fd, mh, flags);
	m = *mh;
	m.msg_name = NULL;
	m.msg_namelen = 0;
	return ff_real.sendmsg(fd, &m, flags);
}

FF_EXPORT ssize_t sendfile(int out, int in, off_t *off, size_t n)
{
	HOLD(out, 0);
	HOLD(in, 0);
	return REAL(sendfile)(out, in, off, n);
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
	struct mmsghdr m[MMSG_CHUNK];
	int ret;

	HOLD(fd, flags & MSG_DONTWAIT);
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
	struct mmsghdr m[MMSG_CHUNK];
	unsigned int done = 0;

	HOLD(fd, flags & MSG_DONTWAIT);
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

/* SPLICE_F_NONBLOCK makes the socket side non-blocking too (sock_splice_read). */
FF_EXPORT ssize_t splice(int in, loff_t *off_in, int out, loff_t *off_out, size_t n,
			 unsigned int flags)
{
	HOLD(in, flags & SPLICE_F_NONBLOCK);
	HOLD(out, flags & SPLICE_F_NONBLOCK);
	return REAL(splice)(in, off_in, out, off_out, n, flags);
}

/* glibc's LFS name; off_t is 64 bits on every ABI the shim supports. */
FF_EXPORT ssize_t sendfile64(int out, int in, off_t *off, size_t n)
{
	return sendfile(out, in, off, n);
}

/* _FORTIFY_SOURCE builds (Debian's default) call these instead. */
FF_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
	HOLD(fd, 0);
	return REAL(read_chk)(fd, buf, n, buflen);
}

FF_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
	HOLD(fd, flags & MSG_DONTWAIT);
	return REAL(recv_chk)(fd, buf, n, buflen, flags);
}

FF_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen,
				 int flags, struct sockaddr *sa, socklen_t *len)
{
	ssize_t ret;

	HOLD(fd, flags & MSG_DONTWAIT);
	if (!sa || !len || !swapped(fd))
		return REAL(recvfrom_chk)(fd, buf, n, buflen, flags, sa, len);
	ret = ff_real.recvfrom_chk(fd, buf, n, buflen, flags, NULL, NULL);
	if (ret >= 0)
		no_source(len);
	return ret;
}
