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
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/sendfile.h>

#include "shim.h"

#define HOLD(fd, nonblock) do {						\
	int hold_ = ff_busy ? 0 : ff_settle((fd), (nonblock));		\
	if (hold_) {							\
		errno = -hold_;						\
		return -1;						\
	}								\
} while (0)

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
	HOLD(fd, flags & MSG_DONTWAIT);
	return REAL(recvfrom)(fd, buf, n, flags, sa, len);
}

FF_EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags,
			 const struct sockaddr *sa, socklen_t len)
{
	HOLD(fd, flags & MSG_DONTWAIT);
	return REAL(sendto)(fd, buf, n, flags, sa, len);
}

FF_EXPORT ssize_t recvmsg(int fd, struct msghdr *mh, int flags)
{
	HOLD(fd, flags & MSG_DONTWAIT);
	return REAL(recvmsg)(fd, mh, flags);
}

FF_EXPORT ssize_t sendmsg(int fd, const struct msghdr *mh, int flags)
{
	HOLD(fd, flags & MSG_DONTWAIT);
	return REAL(sendmsg)(fd, mh, flags);
}

FF_EXPORT ssize_t sendfile(int out, int in, off_t *off, size_t n)
{
	HOLD(out, 0);
	HOLD(in, 0);
	return REAL(sendfile)(out, in, off, n);
}

FF_EXPORT int recvmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags,
		       struct timespec *timeout)
{
	HOLD(fd, flags & MSG_DONTWAIT);
	return REAL(recvmmsg)(fd, v, n, flags, timeout);
}

FF_EXPORT int sendmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags)
{
	HOLD(fd, flags & MSG_DONTWAIT);
	return REAL(sendmmsg)(fd, v, n, flags);
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
	HOLD(fd, flags & MSG_DONTWAIT);
	return REAL(recvfrom_chk)(fd, buf, n, buflen, flags, sa, len);
}
