/* SPDX-License-Identifier: MIT */
/*
 * The fake agent's verbs registry (PROTOCOL.md, "Verbs"), for the
 * provider's tests: QPs and regions by the session that registered them,
 * a QP's ring only to the QP its owner connected it to, peers named by QPN
 * alone (the fake has no containers, so VERBS_PEER's LID
 * and GID are not looked at), each QP's doorbell handed to its peers and rung when they die, grants only through a connected QP to a region
 * in its peer's PD, read-only unless the region allows remote writes or
 * atomics, a dead word set when a session ends, and UD lanes (a sender's
 * memfd handed to the receiver with the sender's QPN); VERBS_QP_RESET swaps a
 * QP's memfd, marks the old one and forgets its pair both ways. With FF_TEST_CHANNEL
 * host-tcp, an RC pair is "on two hosts": VERBS_CONNECT hands each end of
 * the pair one end of a loopback TCP connection (PATH_KIND host-tcp), as
 * two agents do, instead of the peer's memfd. The agent's own rules
 * (internal/agent) are tested in Go.
 */
#ifndef FREEFLOW_FAKE_VERBS_H
#define FREEFLOW_FAKE_VERBS_H

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "freeflow/proto.h"
#include "freeflow/verbs_layout.h"

#define FV_MAX_QPS	256
#define FV_MAX_MRS	256
#define FV_MAX_SEGS	16

struct fv_qp {
	int owner;		/* session fd; 0: free slot */
	uint32_t qpn, pd, peer;
	int memfd, bell;	/* bell: the owner's doorbell, or -1 */
	int sock;		/* across hosts: its end of the pair's connection, until it asks; -1 */
	int paired;		/* across hosts: the pair's connection is made */
};

struct fv_mr {
	int owner;
	uint32_t rkey, pd, access;
	uint8_t mr[24], segs[FV_MAX_SEGS * 16];
	int nsegs, fds[FV_MAX_SEGS];
};

/* A UD lane: the sender's memfd, for the receiving QP to. */
struct fv_lane {
	int owner;		/* the sender's session; 0: free slot */
	uint32_t id, from, to;
	int memfd;		/* across hosts: the receiver's end of the lane's connection */
	int sock;
};

#define FV_MAX_LANES	64

static struct fv_lane fv_lanes[FV_MAX_LANES];
static uint32_t fv_next_lane = 1;
static struct fv_qp fv_qps[FV_MAX_QPS];
static struct fv_mr fv_mrs[FV_MAX_MRS];
static uint32_t fv_next_qpn = 0x100, fv_next_rkey = 0x1000;

static inline void fv_reply(int fd, uint8_t type, uint32_t seq, const int *fds, int nfds,
			    void (*attrs)(struct ff_enc *, const void *), const void *arg)
{
	uint8_t buf[1024];
	char ctl[CMSG_SPACE(sizeof(int) * FV_MAX_SEGS)] = { 0 };
	struct ff_enc e;
	struct iovec iov;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	int n;

	ff_enc_start(&e, buf, sizeof(buf), type, seq);
	if (attrs)
		attrs(&e, arg);
	n = ff_enc_finish(&e);
	if (n < 0)
		return;
	iov = (struct iovec){ buf, (size_t)n };
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
	sendmsg(fd, &mh, MSG_NOSIGNAL);
}

static inline void fv_u32(struct ff_enc *e, const void *arg)
{
	const uint32_t *v = arg;

	ff_enc_u32(e, (uint16_t)v[0], v[1]);
}

static inline void fv_ok_u32(int fd, uint32_t seq, uint16_t type, uint32_t v)
{
	uint32_t a[2] = { type, v };

	fv_reply(fd, FF_MSG_OK, seq, NULL, 0, fv_u32, a);
}

static inline void fv_error(int fd, uint32_t seq, uint32_t code)
{
	uint32_t a[2] = { FF_ATTR_ERR_CODE, code };

	fv_reply(fd, FF_MSG_ERROR, seq, NULL, 0, fv_u32, a);
}

static inline struct fv_qp *fv_qp(uint32_t qpn)
{
	for (int i = 0; i < FV_MAX_QPS; i++)
		if (fv_qps[i].owner && fv_qps[i].qpn == qpn)
			return &fv_qps[i];
	return NULL;
}

static inline void fv_close_fds(const int *fds, int n)
{
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

/* Add v to the u32 at off of a QP-layout memfd's header. */
static inline void fv_hdr_add(int memfd, uint32_t off, uint32_t v)
{
	uint8_t *p = mmap(NULL, FF_VQP_HDR_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);

	if (p != MAP_FAILED) {
		__atomic_fetch_add((uint32_t *)(p + off), v, __ATOMIC_SEQ_CST);
		munmap(p, FF_VQP_HDR_SIZE);
	}
}

/* Set the u32 at off of a QP-layout memfd's header to v. */
static inline void fv_hdr_set(int memfd, uint32_t off, uint32_t v)
{
	uint8_t *p = mmap(NULL, FF_VQP_HDR_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);

	if (p != MAP_FAILED) {
		__atomic_store_n((uint32_t *)(p + off), v, __ATOMIC_SEQ_CST);
		munmap(p, FF_VQP_HDR_SIZE);
	}
}

static inline void fv_lane_dead(struct fv_lane *l)
{
	if (!l->sock)	/* a connection's end is its own news */
		fv_hdr_set(l->memfd, FF_VQP_OFF_DEAD, FF_VQP_DEAD_GONE);
	close(l->memfd);
	l->owner = 0;
}

static inline void fv_peer_attrs(struct ff_enc *e, const void *arg);

/* q's dead word set, its lanes dead, then the doorbells of the QPs connected to it rung. */
static inline void fv_mark_dead(struct fv_qp *q)
{
	fv_hdr_set(q->memfd, FF_VQP_OFF_DEAD, FF_VQP_DEAD_GONE);
	for (int i = 0; i < FV_MAX_LANES; i++)
		if (fv_lanes[i].owner && (fv_lanes[i].from == q->qpn || fv_lanes[i].to == q->qpn))
			fv_lane_dead(&fv_lanes[i]);
	for (int i = 0; i < FV_MAX_QPS; i++)
		if (fv_qps[i].owner && fv_qps[i].peer == q->qpn && fv_qps[i].bell >= 0)
			send(fv_qps[i].bell, "", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
	close(q->memfd);
	if (q->bell >= 0)
		close(q->bell);
	if (q->sock >= 0)
		close(q->sock);
	q->owner = 0;
}

/* q connected to nothing, its end of a pair's connection (across hosts) closed if not handed. */
static inline void fv_unpair(struct fv_qp *q)
{
	if (q->sock >= 0)
		close(q->sock);
	q->sock = -1;
	q->peer = 0;
	q->paired = 0;
}

static inline int fv_across_hosts(void)
{
	const char *ch = getenv("FF_TEST_CHANNEL");

	return ch && !strcmp(ch, "host-tcp");
}

/* A connected loopback TCP pair, as two hosts' agents make one. */
static inline int fv_tcp_pair(int sv[2])
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ok;

	sv[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ok = l >= 0 && sv[0] >= 0 && bind(l, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(l, 1) == 0 &&
	     getsockname(l, (struct sockaddr *)&a, &al) == 0 &&
	     connect(sv[0], (struct sockaddr *)&a, sizeof(a)) == 0 &&
	     (sv[1] = accept4(l, NULL, NULL, SOCK_CLOEXEC)) >= 0;
	if (l >= 0)
		close(l);
	if (!ok && sv[0] >= 0)
		close(sv[0]);
	return ok ? 0 : -1;
}

static inline void fv_path_host_tcp(struct ff_enc *e, const void *arg)
{
	(void)arg;
	ff_enc_u8(e, FF_ATTR_PATH_KIND, FF_PATH_HOST_TCP);
}

static inline void fv_wire_attrs(struct ff_enc *e, const void *arg)
{
	fv_peer_attrs(e, arg);
	ff_enc_u8(e, FF_ATTR_PATH_KIND, FF_PATH_HOST_TCP);
}

static inline void fv_peer_attrs(struct ff_enc *e, const void *arg)
{
	const struct fv_qp *q = arg;
	uint8_t val[8] = { 2 };	/* ibv_qp_type RC */

	ff_enc_u32(e, FF_ATTR_QPN, q->qpn);
	ff_enc_attr(e, FF_ATTR_VERBS_QP, val, sizeof(val));
}

static inline void fv_grant_attrs(struct ff_enc *e, const void *arg)
{
	const struct fv_mr *r = arg;
	uint8_t mr[24];

	memcpy(mr, r->mr, 20);
	memset(mr + 20, 0, 4);	/* PD 0 */
	ff_enc_attr(e, FF_ATTR_VERBS_MR, mr, sizeof(mr));
	ff_enc_attr(e, FF_ATTR_SEGMENTS, r->segs, 16 * (size_t)r->nsegs);
}

/* VERBS_LANES: n entries of (lane id, the sender as VERBS_PEER names it). */
struct fv_lanes_attr {
	uint8_t val[16 * 28];
	int n;
};

static inline void fv_lanes_attrs(struct ff_enc *e, const void *arg)
{
	const struct fv_lanes_attr *l = arg;

	if (l->n)
		ff_enc_attr(e, FF_ATTR_VERBS_LANES, l->val, 28 * (size_t)l->n);
}

/* VERBS_UD_LANE of q's owner: its lane to p replaces an earlier one; p told. */
static inline void fv_ud_lane(int fd, uint32_t seq, struct fv_qp *q, struct fv_qp *p, int memfd)
{
	for (int i = 0; i < FV_MAX_LANES; i++)
		if (fv_lanes[i].owner && fv_lanes[i].from == q->qpn && fv_lanes[i].to == p->qpn)
			fv_lane_dead(&fv_lanes[i]);
	for (int i = 0; i < FV_MAX_LANES; i++)
		if (!fv_lanes[i].owner) {
			int sv[2];

			fv_lanes[i] = (struct fv_lane){ .owner = fd, .id = fv_next_lane++, .from = q->qpn,
							.to = p->qpn, .memfd = memfd };
			/* Across hosts the lane is a connection: the sender's end now, the receiver's later. */
			if (fv_across_hosts()) {
				close(memfd);
				if (fv_tcp_pair(sv)) {
					fv_lanes[i].owner = 0;
					fv_error(fd, seq, FF_ERR_INTERNAL);
					return;
				}
				fv_lanes[i].memfd = sv[1];
				fv_lanes[i].sock = 1;
			}
			fv_hdr_add(p->memfd, FF_VQP_OFF_LANES, 1);
			if (p->bell >= 0)
				send(p->bell, "", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
			if (fv_lanes[i].sock) {
				fv_reply(fd, FF_MSG_OK, seq, &sv[0], 1, fv_path_host_tcp, NULL);
				close(sv[0]);
			} else {
				fv_reply(fd, FF_MSG_OK, seq, &p->bell, p->bell >= 0, NULL, NULL);
			}
			return;
		}
	close(memfd);
	fv_error(fd, seq, FF_ERR_LIMIT);
}

/* VERBS_UD_LANES of q: its live lanes from id from on, in id order, at most 16. */
static inline void fv_ud_lanes(int fd, uint32_t seq, const struct fv_qp *q, uint32_t from)
{
	struct fv_lanes_attr out = { .n = 0 };
	int fds[16];

	while (out.n < 16) {
		struct fv_lane *next = NULL;
		/* The fake's one device: every QP is at LID 0x102, GID ::ffff:10.244.1.2 (tv_setup). */
		uint8_t peer[24] = { 0, 0, 0, 0, 0x02, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff,
				     10, 244, 1, 2 };

		for (int i = 0; i < FV_MAX_LANES; i++)
			if (fv_lanes[i].owner && fv_lanes[i].to == q->qpn && fv_lanes[i].id >= from &&
			    (!next || fv_lanes[i].id < next->id))
				next = &fv_lanes[i];
		if (!next)
			break;
		memcpy(peer, &next->from, 4);
		memcpy(out.val + 28 * out.n, &next->id, 4);
		memcpy(out.val + 28 * out.n + 4, peer, 24);
		fds[out.n++] = next->memfd;
		from = next->id + 1;
	}
	fv_reply(fd, FF_MSG_OK, seq, fds, out.n, fv_lanes_attrs, &out);
	/* A connection handed is the receiver's: the agent keeps no copy (its end is the lane's end). */
	for (int i = 0; i < FV_MAX_LANES; i++)
		if (fv_lanes[i].owner && fv_lanes[i].sock && fv_lanes[i].to == q->qpn &&
		    fv_lanes[i].id < from) {
			close(fv_lanes[i].memfd);
			fv_lanes[i].owner = 0;
		}
}

/* One verbs request of session fd (its fds in fds, taken over). */
static inline void fv_request(int fd, const struct ff_msg *m, int *fds, int nfds)
{
	const struct ff_attr *a;
	struct fv_qp *q, *p;

	switch (m->type) {
	case FF_MSG_VERBS_QP_CREATE:
		a = ff_msg_get(m, FF_ATTR_VERBS_QP);
		for (int i = 0; a && (nfds == 1 || nfds == 2) && i < FV_MAX_QPS; i++)
			if (!fv_qps[i].owner) {
				fv_qps[i] = (struct fv_qp){ .owner = fd, .qpn = fv_next_qpn++, .memfd = fds[0],
							    .bell = nfds == 2 ? fds[1] : -1, .sock = -1 };
				memcpy(&fv_qps[i].pd, a->val + 4, 4);
				fv_ok_u32(fd, m->seq, FF_ATTR_QPN, fv_qps[i].qpn);
				return;
			}
		fv_close_fds(fds, nfds);
		fv_error(fd, m->seq, FF_ERR_INVALID);
		return;
	case FF_MSG_VERBS_CONNECT: {
		uint32_t peer;

		a = ff_msg_get(m, FF_ATTR_VERBS_PEER);
		q = ff_msg_get(m, FF_ATTR_QPN) ? fv_qp(ff_attr_u32(ff_msg_get(m, FF_ATTR_QPN))) : NULL;
		if (!a || !q || q->owner != fd) {
			fv_error(fd, m->seq, FF_ERR_INVALID);
			return;
		}
		memcpy(&peer, a->val, 4);
		if (fv_across_hosts() && q->sock >= 0 && q->peer == peer) {
			/* Its end of the pair's connection, also once the peer is gone (its bytes wait there). */
			struct fv_qp named = { .qpn = peer };

			fv_reply(fd, FF_MSG_VERBS_PEER_QP, m->seq, &q->sock, 1, fv_wire_attrs, &named);
			close(q->sock);
			q->sock = -1;
			return;
		}
		p = fv_qp(peer);
		if (!p) {
			fv_error(fd, m->seq, FF_ERR_NOTFOUND);
			return;
		}
		q->peer = peer;
		/* A QP's ring goes only to the QP its owner connected it to (the agent's rule). */
		if (p->peer != q->qpn) {
			fv_error(fd, m->seq, FF_ERR_NOTFOUND);
			return;
		}
		if (p->bell >= 0)
			send(p->bell, "", 1, MSG_DONTWAIT | MSG_NOSIGNAL);	/* it may wait for this */
		if (fv_across_hosts()) {
			int sv[2];

			if (!q->paired) {	/* the second to connect makes the pair's connection */
				if (fv_tcp_pair(sv)) {
					fv_error(fd, m->seq, FF_ERR_INTERNAL);
					return;
				}
				q->sock = sv[0];
				p->sock = sv[1];
				q->paired = p->paired = 1;
			}
			if (q->sock < 0) {
				fv_error(fd, m->seq, FF_ERR_INVALID);	/* handed already */
				return;
			}
			fv_reply(fd, FF_MSG_VERBS_PEER_QP, m->seq, &q->sock, 1, fv_wire_attrs, p);
			close(q->sock);
			q->sock = -1;
			return;
		}
		{
			int out[2] = { p->memfd, p->bell };

			fv_reply(fd, FF_MSG_VERBS_PEER_QP, m->seq, out, p->bell >= 0 ? 2 : 1, fv_peer_attrs, p);
		}
		return;
	}
	case FF_MSG_VERBS_MR_REG:
		a = ff_msg_get(m, FF_ATTR_SEGMENTS);
		for (int i = 0; a && ff_msg_get(m, FF_ATTR_VERBS_MR) && (int)a->len / 16 == nfds &&
				i < FV_MAX_MRS; i++)
			if (!fv_mrs[i].owner) {
				struct fv_mr *r = &fv_mrs[i];

				*r = (struct fv_mr){ .owner = fd, .rkey = fv_next_rkey += 0x1357, .nsegs = nfds };
				memcpy(r->mr, ff_msg_get(m, FF_ATTR_VERBS_MR)->val, 24);
				memcpy(&r->access, r->mr + 16, 4);
				memcpy(&r->pd, r->mr + 20, 4);
				memcpy(r->segs, a->val, a->len);
				memcpy(r->fds, fds, sizeof(int) * nfds);
				fv_ok_u32(fd, m->seq, FF_ATTR_RKEY, r->rkey);
				return;
			}
		fv_close_fds(fds, nfds);
		fv_error(fd, m->seq, FF_ERR_INVALID);
		return;
	case FF_MSG_VERBS_MR_GET:
		q = ff_msg_get(m, FF_ATTR_QPN) ? fv_qp(ff_attr_u32(ff_msg_get(m, FF_ATTR_QPN))) : NULL;
		p = q && q->owner == fd ? fv_qp(q->peer) : NULL;
		if (p && p->peer != q->qpn)
			p = NULL;	/* not connected back */
		a = ff_msg_get(m, FF_ATTR_RKEY);
		for (int i = 0; p && a && i < FV_MAX_MRS; i++) {
			struct fv_mr *r = &fv_mrs[i];
			int ro[FV_MAX_SEGS];

			if (!r->owner || r->rkey != ff_attr_u32(a) || r->owner != p->owner || r->pd != p->pd)
				continue;
			for (int k = 0; k < r->nsegs; k++) {
				char path[64];

				snprintf(path, sizeof(path), "/proc/self/fd/%d", r->fds[k]);
				ro[k] = r->access & 0xa ? dup(r->fds[k]) : open(path, O_RDONLY | O_CLOEXEC);
			}
			fv_reply(fd, FF_MSG_VERBS_MR_GRANT, m->seq, ro, r->nsegs, fv_grant_attrs, r);
			fv_close_fds(ro, r->nsegs);
			return;
		}
		fv_error(fd, m->seq, FF_ERR_NOTFOUND);
		return;
	case FF_MSG_VERBS_MR_DEREG:
		a = ff_msg_get(m, FF_ATTR_RKEY);
		for (int i = 0; a && i < FV_MAX_MRS; i++)
			if (fv_mrs[i].owner == fd && fv_mrs[i].rkey == ff_attr_u32(a)) {
				fv_close_fds(fv_mrs[i].fds, fv_mrs[i].nsegs);
				fv_mrs[i].owner = 0;
			}
		fv_reply(fd, FF_MSG_OK, m->seq, NULL, 0, NULL, NULL);
		return;
	case FF_MSG_VERBS_UD_LANE:
		q = ff_msg_get(m, FF_ATTR_QPN) ? fv_qp(ff_attr_u32(ff_msg_get(m, FF_ATTR_QPN))) : NULL;
		a = ff_msg_get(m, FF_ATTR_VERBS_PEER);
		if (!q || q->owner != fd || !a || nfds != 1) {
			fv_close_fds(fds, nfds);
			fv_error(fd, m->seq, FF_ERR_INVALID);
			return;
		}
		{
			uint32_t to;

			memcpy(&to, a->val, 4);
			if (!(p = fv_qp(to))) {
				close(fds[0]);
				fv_error(fd, m->seq, FF_ERR_NOTFOUND);
				return;
			}
		}
		fv_ud_lane(fd, m->seq, q, p, fds[0]);
		return;
	case FF_MSG_VERBS_UD_LANES:
		q = ff_msg_get(m, FF_ATTR_QPN) ? fv_qp(ff_attr_u32(ff_msg_get(m, FF_ATTR_QPN))) : NULL;
		a = ff_msg_get(m, FF_ATTR_OFFSET);
		if (!q || q->owner != fd || !a) {
			fv_error(fd, m->seq, FF_ERR_INVALID);
			return;
		}
		fv_ud_lanes(fd, m->seq, q, ff_attr_u32(a));
		return;
	case FF_MSG_VERBS_QP_RESET:
		q = ff_msg_get(m, FF_ATTR_QPN) ? fv_qp(ff_attr_u32(ff_msg_get(m, FF_ATTR_QPN))) : NULL;
		/* FF_TEST_REFUSE_RESET: as an agent restarted since, which knows no such QP. */
		if (!q || q->owner != fd || nfds != 1 || getenv("FF_TEST_REFUSE_RESET")) {
			fv_close_fds(fds, nfds);
			fv_error(fd, m->seq, FF_ERR_INVALID);
			return;
		}
		/* The new memfd for the old, which is marked; the pair forgotten both ways. */
		fv_hdr_set(q->memfd, FF_VQP_OFF_DEAD, FF_VQP_DEAD_RESET);
		close(q->memfd);
		q->memfd = fds[0];
		p = fv_qp(q->peer);
		if (p && p->peer == q->qpn) {
			fv_unpair(p);
			if (p->bell >= 0)
				send(p->bell, "", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
		}
		fv_unpair(q);
		fv_reply(fd, FF_MSG_OK, m->seq, NULL, 0, NULL, NULL);
		return;
	case FF_MSG_VERBS_QP_DESTROY:
		q = ff_msg_get(m, FF_ATTR_QPN) ? fv_qp(ff_attr_u32(ff_msg_get(m, FF_ATTR_QPN))) : NULL;
		if (q && q->owner == fd)
			fv_mark_dead(q);
		fv_reply(fd, FF_MSG_OK, m->seq, NULL, 0, NULL, NULL);
		return;
	}
	fv_close_fds(fds, nfds);
}

/* Session fd ended: its QPs die, its regions go. */
static inline void fv_session_end(int fd)
{
	for (int i = 0; i < FV_MAX_QPS; i++)
		if (fv_qps[i].owner == fd)
			fv_mark_dead(&fv_qps[i]);
	for (int i = 0; i < FV_MAX_MRS; i++)
		if (fv_mrs[i].owner == fd) {
			fv_close_fds(fv_mrs[i].fds, fv_mrs[i].nsegs);
			fv_mrs[i].owner = 0;
		}
}

#endif
