/* SPDX-License-Identifier: MIT */
/*
 * The requests the library makes to the agent (docs/PROTOCOL.md): their
 * encoding, on this thread's session (agent/session.c) or on a given one, and
 * the replies that are read here (LINK_FILL, LISTEN/UNLISTEN). Loopback is
 * never asked about (negotiate.c's design note).
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "agent/agent.h"
#include "core/core.h"

static void enc_endpoint(struct ff_enc *e, uint16_t type,
			 const struct sockaddr_storage *sa)
{
	uint8_t ep[18];
	int n = ff_endpoint(sa, ep);

	if (n < 0)
		e->err = n;
	else
		ff_enc_attr(e, type, ep, (size_t)n);
}

/* What a request names: endpoints (NULL: none), or a link's name and a count (LINK_FILL). */
struct req {
	const struct sockaddr_storage *local, *remote;
	uint64_t link;
	uint32_t count;
};

/* Encode request q on session a into buf (REQ_MAX bytes): its length (and *seq), or -errno. */
#define REQ_MAX	(FF_HDR_LEN + 2 * FF_ATTR_HDR_LEN + 2 * FF_EP6_LEN)
static int encode_req(struct ff_agent *a, uint8_t msg, const struct req *q, uint8_t *buf,
		      uint32_t *seq)
{
	struct ff_enc e;

	*seq = ff_agent_next_seq(a);
	ff_enc_start(&e, buf, REQ_MAX, msg, *seq);
	if (q->local)
		enc_endpoint(&e, FF_ATTR_LOCAL_EP, q->local);
	if (q->remote)
		enc_endpoint(&e, FF_ATTR_REMOTE_EP, q->remote);
	if (q->link) {
		ff_enc_u64(&e, FF_ATTR_LINK, q->link);
		ff_enc_u32(&e, FF_ATTR_COUNT, q->count);
	}
	return ff_enc_finish(&e);
}

/*
 * One request on session a; want 0: a notification, no reply (r unused),
 * carrying fd unless it is -1. Without local, no endpoint (LEDGER).
 */
static int request_on(struct ff_agent *a, uint8_t msg, const struct req *q, int fd, uint8_t want,
		      struct ff_reply *r)
{
	uint8_t buf[REQ_MAX];
	uint32_t seq;
	int n = encode_req(a, msg, q, buf, &seq);

	if (n < 0)
		return n;
	return want ? ff_agent_request(a, buf, n, want, r) : ff_agent_notify(a, buf, n, fd);
}

/*
 * One request on this thread's session; ff_busy keeps the shim out of it.
 * A session that was open already may lead to an agent that has gone (it
 * was restarted: EOF at once, no wait); then the request is made once more
 * on a new session, which re-registers the listeners first (listeners.c).
 */
static int request(uint8_t msg, const struct req *q, int fd, uint8_t want, struct ff_reply *r)
{
	struct ff_agent *a;
	int ret, fresh;

	if (q->local && ff_skip_loopback(q->local))
		return -EADDRNOTAVAIL;	/* before a session is even opened */
	ff_busy = 1;
	do {
		fresh = ff_control_get(&a);
		ret = fresh < 0 ? fresh : request_on(a, msg, q, fd, want, r);
		if (ret < 0 && fresh >= 0)
			ff_control_broken(ret);
	} while (ret == -ECONNRESET && fresh == 0);
	ff_busy = 0;
	return ret;
}

int ff_send_ledger(int memfd)
{
	return request(FF_MSG_LEDGER, &(struct req){ 0 }, memfd, 0, NULL);
}

int ff_send_ledger_on(struct ff_agent *a, int memfd)
{
	return request_on(a, FF_MSG_LEDGER, &(struct req){ 0 }, memfd, 0, NULL);
}

int64_t ff_link_fill_send(struct ff_agent *a, uint64_t link, uint32_t count)
{
	uint8_t buf[REQ_MAX];
	uint32_t seq;
	int n = encode_req(a, FF_MSG_LINK_FILL, &(struct req){ .link = link, .count = count }, buf,
			   &seq);

	if (n < 0)
		return n;
	n = ff_agent_send(a, buf, n);
	return n < 0 ? n : (int64_t)seq;
}

int64_t ff_watch_send(struct ff_agent *a, int parked, const char *why)
{
	uint8_t buf[FF_HDR_LEN + 2 * FF_ATTR_HDR_LEN + 1 + 64];	/* REASON: at most 64 bytes */
	uint32_t seq = ff_agent_next_seq(a);
	struct ff_enc e;
	int n;

	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_WATCH, seq);
	if (parked >= 0)
		ff_enc_u8(&e, FF_ATTR_FOUND, (uint8_t)parked);
	if (parked == 0 && why)
		ff_enc_str(&e, FF_ATTR_REASON, why);
	n = ff_enc_finish(&e);
	if (n < 0)
		return n;
	n = ff_agent_send(a, buf, n);
	return n < 0 ? n : (int64_t)seq;
}

int ff_park_read(struct ff_reply *r, struct ff_park *p)
{
	const struct ff_attr *l = ff_msg_get(&r->msg, FF_ATTR_LOCAL_EP);
	const struct ff_attr *m = ff_msg_get(&r->msg, FF_ATTR_REMOTE_EP);
	const struct ff_attr *adopt = ff_msg_get(&r->msg, FF_ATTR_FOUND);
	const struct ff_attr *role = ff_msg_get(&r->msg, FF_ATTR_ROLE);
	int resume = r->msg.type == FF_MSG_RESUME, ret = -EPROTO;

	if ((resume ? role && (ff_attr_u8(role) == 1 || ff_attr_u8(role) == 2) : r->msg.type == FF_MSG_PARK) &&
	    l && m && l->len <= FF_EP6_LEN &&
	    m->len <= FF_EP6_LEN && (r->nfds == 1 || (resume && r->nfds == 2)) &&
	    (resume || ff_is_socket(r->fds[0], SOCK_STREAM, 0)) &&
	    (r->nfds == 1 || ff_is_socket(r->fds[1], SOCK_STREAM, 1))) {
		p->role = resume ? ff_attr_u8(role) : 0;
		memcpy(p->local, l->val, l->len);
		memcpy(p->remote, m->val, m->len);
		p->local_len = (uint8_t)l->len;
		p->remote_len = (uint8_t)m->len;
		p->adopt = adopt && ff_attr_u8(adopt);
		p->sock = r->fds[0];
		p->bell = r->nfds == 2 ? r->fds[1] : -1;
		r->fds[0] = r->fds[1] = -1;
		ret = 0;
	}
	ff_reply_close_fds(r);
	return ret;
}

int ff_link_fill_read(struct ff_reply *r, int *fds, int cap)
{
	const struct ff_attr *kind = ff_msg_get(&r->msg, FF_ATTR_PATH_KIND);
	int ret = 0, n = 0;

	if (r->msg.type == FF_MSG_ERROR) {
		const struct ff_attr *code = ff_msg_get(&r->msg, FF_ATTR_ERR_CODE);

		ret = code && ff_attr_u32(code) == FF_ERR_NOTFOUND ? -ENOENT : -EAGAIN;
	} else if (!kind || ff_attr_u8(kind) != FF_PATH_HOST_TCP) {
		ret = -EPROTO;
	}
	for (unsigned i = 0; !ret && i < r->nfds && n < cap; i++)
		if (ff_is_socket(r->fds[i], SOCK_STREAM, 0)) {
			fds[n++] = r->fds[i];
			r->fds[i] = -1;
		}
	ff_reply_close_fds(r);
	return ret ? ret : n;
}

static int announce_reply(int ret, struct ff_reply *r)
{
	if (ret)
		return ret;
	ff_reply_close_fds(r);
	return r->msg.type == FF_MSG_OK ? 0 : -EPERM;
}

int ff_announce(uint8_t msg, const struct sockaddr_storage *local,
		const struct sockaddr_storage *remote)
{
	struct ff_reply r;

	struct req q = { .local = local, .remote = remote };

	if (msg == FF_MSG_CLOSED)	/* a notification: sent, never answered */
		return request(msg, &q, -1, 0, NULL);
	return announce_reply(request(msg, &q, -1, FF_MSG_OK, &r), &r);
}

int ff_announce_on(struct ff_agent *a, uint8_t msg, const struct sockaddr_storage *local,
		   const struct sockaddr_storage *remote)
{
	struct ff_reply r;

	if (ff_skip_loopback(local))
		return -EADDRNOTAVAIL;
	return announce_reply(request_on(a, msg, &(struct req){ .local = local, .remote = remote },
					 -1, FF_MSG_OK, &r), &r);
}

int ff_ask(uint8_t msg, const struct sockaddr_storage *local,
	   const struct sockaddr_storage *remote, struct ff_reply *r)
{
	return request(msg, &(struct req){ .local = local, .remote = remote }, -1, FF_MSG_PATH, r);
}
