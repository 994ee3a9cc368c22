/* SPDX-License-Identifier: MIT */
/*
 * poll(), ppoll(), select() and pselect() while a non-blocking connect is
 * pending. All four share one path built on libc's ppoll(), so the signal
 * mask of ppoll/pselect is applied atomically, as the caller asked.
 *
 * With no pending connection in the process (the usual case) both go
 * straight to libc after one atomic load. Otherwise each pending fd in the
 * set is also polled for POLLOUT, so its completion wakes the caller even
 * if it waits only for input; a pending fd that is reported is decided at
 * once, and its revents are then taken again, without waiting, from the
 * fd as it now is (swapped or not) and for the events the caller asked.
 * If that leaves nothing to report, the wait starts over (a timeout may
 * then be stretched by the time already spent: a documented limit).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

static int is_pending_fd(int fd)
{
	struct ff_slot *s = ff_fd_slot(fd);

	return s && (atomic_load(&s->flags) & FF_FD_PENDING);
}

/* Returns the number of ready entries, or -1 with errno set; ts NULL waits forever. */
static int poll_pending(struct pollfd *fds, nfds_t n, const struct timespec *ts,
			const sigset_t *mask)
{
	struct pollfd *k = malloc(n * sizeof(*k));
	int ret, ready;

	if (!k)
		return ff_real.ppoll(fds, n, ts, mask);
	for (;;) {
		memcpy(k, fds, n * sizeof(*k));
		for (nfds_t i = 0; i < n; i++)
			if (is_pending_fd(k[i].fd))
				k[i].events |= POLLOUT;
		ret = ff_real.ppoll(k, n, ts, mask);
		if (ret <= 0)
			break;
		ready = 0;
		for (nfds_t i = 0; i < n; i++) {
			fds[i].revents = k[i].revents;
			if (k[i].revents && is_pending_fd(k[i].fd) &&
			    ff_settle(k[i].fd, 1) != -EAGAIN) {
				struct pollfd one = { .fd = fds[i].fd, .events = fds[i].events };

				ff_real.poll(&one, 1, 0);
				fds[i].revents = one.revents;
			} else if (k[i].revents && !(fds[i].events & POLLOUT)) {
				fds[i].revents &= (short)~POLLOUT;
			}
			ready += fds[i].revents != 0;
		}
		if (ready) {
			ret = ready;
			break;
		}
	}
	free(k);
	return ret;
}

/* A poll() timeout in ms as ppoll's timespec; NULL (forever) when negative. */
static const struct timespec *ms_timespec(int ms, struct timespec *ts)
{
	if (ms < 0)
		return NULL;
	ts->tv_sec = ms / 1000;
	ts->tv_nsec = (long)(ms % 1000) * 1000000;
	return ts;
}

FF_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	struct timespec ts;

	if (ff_busy || !atomic_load(&ff_pending_count))
		return REAL(poll)(fds, n, timeout);
	return poll_pending(fds, n, ms_timespec(timeout, &ts), NULL);
}

FF_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts,
		    const sigset_t *mask)
{
	if (ff_busy || !atomic_load(&ff_pending_count))
		return REAL(ppoll)(fds, n, ts, mask);
	return poll_pending(fds, n, ts, mask);
}

/*
 * _FORTIFY_SOURCE builds call these; libc's own checks the array size and
 * aborts on overflow, so an undersized array still goes to it.
 */
FF_EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
	if (!REAL(poll_chk) || (!ff_busy && atomic_load(&ff_pending_count) &&
				fdslen / sizeof(*fds) >= n))
		return poll(fds, n, timeout);
	return ff_real.poll_chk(fds, n, timeout, fdslen);
}

FF_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts,
			  const sigset_t *mask, size_t fdslen)
{
	if (!REAL(ppoll_chk) || (!ff_busy && atomic_load(&ff_pending_count) &&
				 fdslen / sizeof(*fds) >= n))
		return ppoll(fds, n, ts, mask);
	return ff_real.ppoll_chk(fds, n, ts, mask, fdslen);
}

static int select_has_pending(int nfds, fd_set *r, fd_set *w, fd_set *e)
{
	for (int fd = 0; fd < nfds; fd++)
		if (((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (e && FD_ISSET(fd, e))) &&
		    is_pending_fd(fd))
			return 1;
	return 0;
}

/* select() in terms of poll_pending(); nfds <= FD_SETSIZE by select's contract. */
static int select_pending(int nfds, fd_set *r, fd_set *w, fd_set *e,
			  const struct timespec *ts, const sigset_t *mask)
{
	struct pollfd p[FD_SETSIZE];
	int n = 0, ret;

	for (int fd = 0; fd < nfds; fd++) {
		short ev = (short)((r && FD_ISSET(fd, r) ? POLLIN : 0) |
				   (w && FD_ISSET(fd, w) ? POLLOUT : 0) |
				   (e && FD_ISSET(fd, e) ? POLLPRI : 0));

		if (ev)
			p[n++] = (struct pollfd){ .fd = fd, .events = ev };
	}
	ret = poll_pending(p, (nfds_t)n, ts, mask);
	if (ret < 0)
		return ret;
	if (r) FD_ZERO(r);
	if (w) FD_ZERO(w);
	if (e) FD_ZERO(e);
	ret = 0;
	for (int i = 0; i < n; i++) {
		short re = p[i].revents;

		if (re & POLLNVAL) {
			errno = EBADF;
			return -1;
		}
		if (r && (p[i].events & POLLIN) && (re & (POLLIN | POLLHUP | POLLERR)))
			FD_SET(p[i].fd, r), ret++;
		if (w && (p[i].events & POLLOUT) && (re & (POLLOUT | POLLERR)))
			FD_SET(p[i].fd, w), ret++;
		if (e && (p[i].events & POLLPRI) && (re & POLLPRI))
			FD_SET(p[i].fd, e), ret++;
	}
	return ret;
}

FF_EXPORT int select(int nfds, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv)
{
	struct timespec ts;

	if (ff_busy || !atomic_load(&ff_pending_count) || nfds > FD_SETSIZE ||
	    !select_has_pending(nfds, r, w, e))
		return REAL(select)(nfds, r, w, e, tv);
	if (tv) {
		ts.tv_sec = tv->tv_sec;
		ts.tv_nsec = tv->tv_usec * 1000;
	}
	return select_pending(nfds, r, w, e, tv ? &ts : NULL, NULL);
}

FF_EXPORT int pselect(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct timespec *ts,
		      const sigset_t *mask)
{
	if (ff_busy || !atomic_load(&ff_pending_count) || nfds > FD_SETSIZE ||
	    !select_has_pending(nfds, r, w, e))
		return REAL(pselect)(nfds, r, w, e, ts, mask);
	return select_pending(nfds, r, w, e, ts, mask);
}
