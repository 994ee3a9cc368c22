/* SPDX-License-Identifier: MIT */
/*
 * Agent client: connect, one request/one reply with fds, notifications,
 * HELLO and LOOKUP.
 *
 * The socket is non-blocking and every wait is a poll() against one
 * monotonic deadline per call, so signals (EINTR) and partial progress never
 * stretch the bound the caller asked for.
 *
 * Inside the library a libc name is the library's own wrapper, so libc is
 * reached through ff_real (lib/README.md, "Rules for code inside the
 * library"), resolved on connect or attach: the unit tests link this file
 * without the library.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "core/core.h"

/*
 * A blocking AF_UNIX connect waits for room in the listener's backlog for at
 * most SO_SNDTIMEO, so the kernel enforces our bound; a non-blocking one
 * would fail at once with EAGAIN and give the agent no chance under load.
 */
static int connect_bounded(int fd, const struct sockaddr_un *sa, int64_t deadline)
{
	for (;;) {
		int64_t left = deadline - ff_now_ms();
		struct timeval tv;

		if (left <= 0)
			return -ETIMEDOUT;
		tv.tv_sec = left / 1000;
		tv.tv_usec = (left % 1000) * 1000;
		if (ff_real.setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
			return -errno;
		if (ff_real.connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0)
			return 0;
		if (errno == EAGAIN)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
}

int ff_agent_connect(struct ff_agent *a, const char *path, int timeout_ms)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int64_t deadline = ff_now_ms() + timeout_ms;
	int fd, ret;

	a->fd = -1;
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path));
	ff_real_resolve();
	fd = ff_real.socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	ret = connect_bounded(fd, &sa, deadline);
	if (!ret)
		ret = ff_agent_attach(a, fd, timeout_ms);
	if (ret)
		ff_real.close(fd);
	return ret;
}

int ff_agent_verify(const struct ff_agent *a, struct ucred *peer)
{
	socklen_t len = sizeof(*peer);

	if (ff_real.getsockopt(a->fd, SOL_SOCKET, SO_PEERCRED, peer, &len) < 0)
		return -errno;
	return peer->pid == 0 && peer->uid == 0 ? 0 : -FF_EUNTRUSTED;
}

const char *ff_agent_strerror(int err)
{
	if (err == -FF_EUNTRUSTED)
		return "its socket is not served by root outside this container: not trusted";
	if (err == -FF_ELIMIT)
		return "agent session limit: this container holds all the sessions it may";
	return strerror(-err);
}

int ff_agent_attach(struct ff_agent *a, int fd, int timeout_ms)
{
	int fl;

	ff_real_resolve();
	fl = ff_real.fcntl(fd, F_GETFL);
	if (fl < 0 || ff_real.fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	*a = (struct ff_agent){ .fd = fd, .timeout_ms = timeout_ms };
	return 0;
}

void ff_agent_close(struct ff_agent *a)
{
	if (a->fd >= 0)
		(a->close_fd ? a->close_fd : ff_real.close)(a->fd);
	a->fd = -1;
}

uint32_t ff_agent_next_seq(struct ff_agent *a)
{
	return ++a->seq;
}

void ff_reply_close_fds(struct ff_reply *r)
{
	for (unsigned int i = 0; i < r->nfds; i++)
		if (r->fds[i] >= 0)	/* a caller took it (-1) */
			ff_real.close(r->fds[i]);
	r->nfds = 0;
}

/* MSG_NOSIGNAL: a dead agent must not kill the application with SIGPIPE. sendfd -1: none. */
static int send_msg(int fd, const void *buf, int len, int sendfd, int64_t deadline)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} ctl = { 0 };
	struct iovec iov = { (void *)buf, (size_t)len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (sendfd >= 0) {
		mh.msg_control = ctl.b;
		mh.msg_controllen = sizeof(ctl.b);
		ctl.h.cmsg_level = SOL_SOCKET;
		ctl.h.cmsg_type = SCM_RIGHTS;
		ctl.h.cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(&ctl.h), &sendfd, sizeof(int));
	}
	for (;;) {
		ssize_t n = ff_real.sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		int ret;

		if (n == len)
			return 0;
		if (n >= 0)	/* SOCK_SEQPACKET sends whole datagrams */
			return -EPROTO;
		if (errno == EPIPE)
			return -ECONNRESET;
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		ret = ff_poll_until(fd, POLLOUT, deadline);
		if (ret <= 0)
			return ret ? ret : -ETIMEDOUT;
	}
}

/* Keep the fds of every SCM_RIGHTS header; say whether any was dropped. */
static int take_fds(struct msghdr *mh, struct ff_reply *r)
{
	struct cmsghdr *c;

	for (c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		size_t n;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
			if (r->nfds < FF_AGENT_MAX_FDS)
				r->fds[r->nfds++] = fd;
			else
				ff_real.close(fd);
		}
	}
	return mh->msg_flags & MSG_CTRUNC ? -EPROTO : 0;
}

/*
 * Receive one datagram. MSG_CMSG_CLOEXEC closes the window in which a
 * concurrent fork+exec in the application could inherit a passed fd.
 */
static int recv_msg(int fd, struct ff_reply *r, int64_t deadline)
{
	union {
		char buf[CMSG_SPACE(FF_AGENT_MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = r->buf, .iov_len = sizeof(r->buf) };
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf),
	};

	for (;;) {
		ssize_t n = ff_real.recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		int ret;

		if (n > 0) {
			ret = take_fds(&mh, r);
			if (!ret && (mh.msg_flags & MSG_TRUNC))
				ret = -EMSGSIZE;
			return ret ? ret : (int)n;
		}
		if (n == 0)	/* peer closed; a 0-byte datagram is malformed anyway */
			return -ECONNRESET;
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		ret = ff_poll_until(fd, POLLIN, deadline);
		if (ret <= 0)
			return ret ? ret : -ETIMEDOUT;
	}
}

static int check_reply(struct ff_reply *r, uint32_t seq, uint8_t want)
{
	if (r->msg.seq != seq)
		return -EPROTO;
	if (r->msg.type == FF_MSG_ERROR)
		return ff_msg_get(&r->msg, FF_ATTR_ERR_CODE) ? 0 : -EPROTO;
	/* WATCH is answered PARK or RESUME. */
	return r->msg.type == want || (want == FF_MSG_PARK && r->msg.type == FF_MSG_RESUME) ? 0 : -EPROTO;
}

/*
 * Receive the reply to the request with seq. A reply older than it (serial
 * order: seq wraps) can only answer a notification, since a request that
 * got no reply closes the session: an agent from before CLOSED became a
 * notification answers it with OK. Such a reply is dropped, so the request
 * still reads its own.
 */
static int recv_reply(int fd, struct ff_reply *r, uint32_t seq, uint8_t want, int64_t deadline)
{
	for (;;) {
		int n = recv_msg(fd, r, deadline);

		if (n < 0)
			return n;
		if (ff_msg_decode(r->buf, (size_t)n, &r->msg))
			return -EPROTO;
		if ((int32_t)(r->msg.seq - seq) >= 0)
			return check_reply(r, seq, want);
		ff_reply_close_fds(r);
	}
}

int ff_agent_notify(struct ff_agent *a, const void *msg, int len, int fd)
{
	struct ff_msg q;
	int ret;

	if (a->fd < 0)
		return -ENOTCONN;
	if (len <= 0 || ff_msg_decode(msg, (size_t)len, &q))
		return -EINVAL;
	ret = send_msg(a->fd, msg, len, fd, ff_now_ms() + a->timeout_ms);
	if (ret)
		ff_agent_close(a);
	return ret;
}

int ff_agent_send(struct ff_agent *a, const void *req, int len)
{
	return ff_agent_notify(a, req, len, -1);
}

int ff_agent_await(struct ff_agent *a, uint32_t seq, uint8_t want, struct ff_reply *r,
		   int wait_ms)
{
	int ret;

	r->nfds = 0;
	if (a->fd < 0)
		return -ENOTCONN;
	ret = recv_reply(a->fd, r, seq, want, ff_now_ms() + wait_ms);
	if (ret == -ETIMEDOUT && !wait_ms)
		return -EAGAIN;
	if (ret < 0) {
		ff_reply_close_fds(r);
		ff_agent_close(a);
	}
	return ret;
}

int ff_agent_request(struct ff_agent *a, const void *req, int len,
		     uint8_t want, struct ff_reply *r)
{
	struct ff_msg q;
	int ret;

	r->nfds = 0;
	if (len <= 0 || ff_msg_decode(req, (size_t)len, &q))
		return a->fd < 0 ? -ENOTCONN : -EINVAL;
	ret = ff_agent_send(a, req, len);
	return ret ? ret : ff_agent_await(a, q.seq, want, r, a->timeout_ms);
}
