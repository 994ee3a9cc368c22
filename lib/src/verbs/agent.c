/* SPDX-License-Identifier: MIT */
/*
 * The provider's session with the host's agent (PROTOCOL.md, "Verbs"): one
 * per context, opened at the first request, on the library socket, with the
 * same trust rule as the library's (rule 0: the socket is served by root
 * outside this pid namespace) and a HELLO. Requests are blocking and
 * bounded: the agent answers each at once or the session is dropped.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "freeflow/proto.h"
#include "verbs/verbs.h"

#define AGENT_SOCKET	"/run/freeflow/agent.sock"
#define AGENT_WAIT_MS	5000	/* an agent that does not answer in 5 s is broken */
#define MAX_FDS		16	/* SEGMENTS has at most 16 */

int ffv_debug_on(void)
{
	const char *d = getenv("FREEFLOW_DEBUG");

	return d && *d && strcmp(d, "0");
}

uint32_t ffv_next_seq(struct ffv_context *c)
{
	return ++c->seq;
}

void ffv_agent_close(struct ffv_context *c)
{
	if (c->agent >= 0)
		close(c->agent);
	c->agent = -1;
}

static int send_msg(int fd, const uint8_t *buf, size_t len, const int *fds, int nfds)
{
	char ctl[CMSG_SPACE(sizeof(int) * MAX_FDS)] = { 0 };
	struct iovec iov = { (void *)buf, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (nfds > MAX_FDS)
		return -EINVAL;
	if (nfds > 0) {
		struct cmsghdr *cm;

		mh.msg_control = ctl;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
	}
	return sendmsg(fd, &mh, MSG_NOSIGNAL) == (ssize_t)len ? 0 : -EPIPE;
}

/* One datagram into buf, its fds into fds (at most *nfds; the rest closed). */
static ssize_t recv_msg(int fd, uint8_t *buf, size_t cap, int *fds, int *nfds)
{
	char ctl[CMSG_SPACE(sizeof(int) * MAX_FDS)];
	struct iovec iov = { buf, cap };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
			     .msg_controllen = sizeof(ctl) };
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int max = *nfds, got = 0;
	ssize_t n;

	*nfds = 0;
	if (poll(&p, 1, AGENT_WAIT_MS) != 1)
		return -ETIMEDOUT;
	n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	if (n <= 0)
		return n < 0 ? -errno : -ECONNRESET;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int f;

			memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (got < max)
				fds[got++] = f;
			else
				close(f);
		}
	}
	*nfds = got;
	if (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		while (got > 0)
			close(fds[--got]);
		*nfds = 0;
		return -EPROTO;
	}
	return n;
}

static int agent_path(char *path, size_t cap)
{
	const char *p = getenv("FREEFLOW_AGENT_SOCKET");

	return snprintf(path, cap, "%s", p && *p ? p : AGENT_SOCKET) < (int)cap ? 0 : -ENAMETOOLONG;
}

/* Connect, check who serves the socket, HELLO. */
static int agent_open(struct ffv_context *c)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct ucred peer;
	socklen_t pl = sizeof(peer);
	uint8_t buf[1024];
	struct ff_enc e;
	struct ff_msg m;
	int fd, n, nfds = 0, err;

	if ((err = agent_path(sa.sun_path, sizeof(sa.sun_path))))
		return err;
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		err = -errno;
		goto fail;
	}
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &pl) < 0 || peer.pid != 0 || peer.uid != 0) {
		err = -EPERM;	/* not the host's agent (PROTOCOL.md, "Session", rule 0) */
		goto fail;
	}
	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_HELLO, ffv_next_seq(c));
	ff_enc_str(&e, FF_ATTR_LIB_VERSION, "libffv-0.1");
	n = ff_enc_finish(&e);
	if (n < 0 || (err = send_msg(fd, buf, n, NULL, 0)))
		goto fail;
	n = recv_msg(fd, buf, sizeof(buf), NULL, &nfds);
	if (n < 0 || ff_msg_decode(buf, n, &m) || m.type != FF_MSG_HELLO_REPLY) {
		err = n < 0 ? n : -EPROTO;
		goto fail;
	}
	c->agent = fd;
	return 0;
fail:
	close(fd);
	return err;
}

int ffv_agent_call(struct ffv_context *c, uint8_t *buf, size_t len, const int *fds, int nfds,
		   struct ff_msg *reply, size_t cap, int *rfds, int *nrfds)
{
	uint32_t seq = buf[4] | buf[5] << 8 | (uint32_t)buf[6] << 16 | (uint32_t)buf[7] << 24;
	int max = *nrfds, err;
	ssize_t n;

	*nrfds = 0;
	if (c->agent < 0 && (err = agent_open(c))) {
		if (ffv_debug_on())
			fprintf(stderr, "libffv: no session with the FreeFlow agent: %s\n", strerror(-err));
		return err;
	}
	if ((err = send_msg(c->agent, buf, len, fds, nfds))) {
		ffv_agent_close(c);
		return err;
	}
	*nrfds = max;
	n = recv_msg(c->agent, buf, cap, rfds, nrfds);
	if (n < 0 || ff_msg_decode(buf, n, reply) || reply->seq != seq) {
		while (*nrfds > 0)
			close(rfds[--*nrfds]);
		ffv_agent_close(c);
		return n < 0 ? (int)n : -EPROTO;
	}
	if (reply->type == FF_MSG_ERROR) {
		const struct ff_attr *code = ff_msg_get(reply, FF_ATTR_ERR_CODE);
		const struct ff_attr *msg = ff_msg_get(reply, FF_ATTR_ERR_MSG);

		while (*nrfds > 0)
			close(rfds[--*nrfds]);
		if (ffv_debug_on() && msg)
			fprintf(stderr, "libffv: the agent refused: %.*s\n", (int)msg->len, msg->val);
		return code && ff_attr_u32(code) ? (int)ff_attr_u32(code) : -EPROTO;
	}
	return 0;
}
