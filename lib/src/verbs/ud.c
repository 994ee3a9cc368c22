/* SPDX-License-Identifier: MIT */
/*
 * UD queue pairs and address handles (docs/VERBS.md, "Datagrams"). A UD
 * QP takes datagrams from any UD QP that may reach it, so each sender has
 * a lane of its own to each receiver: a ring in a memfd the sender makes
 * and the agent hands to the receiver with the sender's identity
 * (PROTOCOL.md, "UD lanes"), so no sender can break or forge another's
 * datagrams. A datagram is one record of at most the port's MTU; one that
 * finds no room, or no receiver, is dropped, as a fabric drops it. Across
 * hosts a lane is a TCP connection the agents made (docs/VERBS.md,
 * "Across hosts"): the sender writes each datagram as a frame, the
 * receiver reads them into a ring of its own, as a local lane's.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "freeflow/proto.h"
#include "verbs/verbs.h"

#define UD_MTU		4096		/* the port's active_mtu (device.c) */
#define LANE_RING	(256u << 10)	/* a sender's lane: 60 full datagrams, untouched pages free */
#define GRH_SIZE	40		/* a UD receive's first 40 bytes are the GRH's, present or not */
#define RETRY_NS	1000000		/* a receiver not found is asked for again after this, */
#define RETRY_MAX_NS	100000000	/* doubling up to this */
#define LANES_PER_ASK	16		/* the agent names at most this many lanes per answer */

struct ibv_ah *ffv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct ffv_ah *ah;

	if (attr->port_num != 1 || (!attr->is_global && !attr->dlid)) {
		errno = EINVAL;
		return NULL;
	}
	ah = calloc(1, sizeof(*ah));
	if (!ah)
		return NULL;
	ah->attr = *attr;
	ah->ibv_ah.context = pd->context;
	ah->ibv_ah.pd = pd;
	return &ah->ibv_ah;
}

int ffv_destroy_ah(struct ibv_ah *ah)
{
	free(ffv_ah(ah));
	return 0;
}

/* Whether the event thread watches l's connection: only while its receiver sleeps on an armed CQ. */
static void lane_watch(struct ffv_context *c, struct ffv_lane *l, int on)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = l->sock };

	if (l->sock < 0 || l->watched == on || !c->events_on || c->events_pid != getpid())
		return;
	epoll_ctl(c->ep, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, l->sock, &ev);
	l->watched = on;
}

/* A lane unmapped, its doorbell and connection closed: dead, or never reached. */
static void lane_unmap(struct ffv_context *c, struct ffv_lane *l)
{
	if (l->mem)
		munmap(l->mem, FF_VQP_HDR_SIZE + l->ring);
	l->mem = NULL;
	if (l->bell >= 0)
		close(l->bell);
	l->bell = -1;
	lane_watch(c, l, 0);
	if (l->sock >= 0)
		ffv_wire_end(l->sock);
	l->sock = -1;
	free(l->pend);
	l->pend = NULL;
}

static void lane_free(struct ffv_context *c, struct ffv_lane *l)
{
	lane_unmap(c, l);
	free(l);
}

void ffv_ud_free(struct ffv_qp *qp)
{
	for (struct ffv_lane **list = &qp->tx_lanes; list <= &qp->rx_lanes; list++)
		while (*list) {
			struct ffv_lane *l = *list;

			*list = l->next;
			lane_free(ffv_ctx(qp->vqp.qp.context), l);
		}
}

static int lane_dead(const struct ffv_lane *l)
{
	return __atomic_load_n((const uint32_t *)(l->mem + FF_VQP_OFF_DEAD), __ATOMIC_ACQUIRE) != 0;
}

/* ---- the sender's side ---- */

/* ctx->mu held: VERBS_UD_LANE: a new lane of ours to l->peer, mapped into l. */
static void lane_open(struct ffv_qp *qp, struct ffv_lane *l)
{
	struct ffv_context *c = ffv_ctx(qp->vqp.qp.context);
	const struct ff_attr *kind;
	uint8_t buf[256];
	int fd, bell = -1, nb = 1, n;
	struct ff_enc e;
	struct ff_msg m;

	l->ring = LANE_RING;
	if (ffv_ring_make(LANE_RING, &fd, &l->mem))
		goto none;
	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_VERBS_UD_LANE, ffv_next_seq(c));
	ff_enc_u32(&e, FF_ATTR_QPN, qp->vqp.qp.qp_num);
	ff_enc_attr(&e, FF_ATTR_VERBS_PEER, l->peer, 24);
	n = ff_enc_finish(&e);
	if (n < 0 || ffv_agent_call(c, buf, n, &fd, 1, &m, sizeof(buf), &bell, &nb) ||
	    m.type != FF_MSG_OK) {
		if (nb > 0)
			close(bell);
		close(fd);
		goto none;
	}
	close(fd);
	l->pos = 0;
	kind = ff_msg_get(&m, FF_ATTR_PATH_KIND);
	if (kind && kind->len == 1 && kind->val[0] == FF_PATH_HOST_TCP) {
		/* On another host: the fd is the lane's connection, our ring is not used. */
		if (nb != 1 || ffv_wire_socket(bell)) {
			if (nb > 0)
				close(bell);
			goto none;
		}
		munmap(l->mem, FF_VQP_HDR_SIZE + l->ring);
		l->mem = NULL;
		l->sock = bell;
		l->backoff = 0;
		return;
	}
	l->bell = nb > 0 ? bell : -1;
	l->backoff = 0;
	return;
none:
	/*
	 * No such receiver (yet), another tenant's, or no agent: datagrams to
	 * it are lost, and it is asked for again less and less often (across
	 * hosts each ask costs the agents an offer).
	 */
	lane_unmap(c, l);
	l->backoff = l->backoff ? (l->backoff * 2 > RETRY_MAX_NS ? RETRY_MAX_NS : l->backoff * 2) : RETRY_NS;
	l->retry_at = ffv_now_ns() + l->backoff;
}

/* ctx->mu held: our lane to peer, opened if there is none or it died; NULL: none to be had. */
static struct ffv_lane *tx_lane(struct ffv_qp *qp, const uint8_t peer[24])
{
	struct ffv_lane *l;

	for (l = qp->tx_lanes; l && memcmp(l->peer, peer, 24); l = l->next)
		;
	if (!l) {
		if (!(l = calloc(1, sizeof(*l))))
			return NULL;
		memcpy(l->peer, peer, 24);
		l->bell = -1;
		l->sock = -1;
		l->next = qp->tx_lanes;
		qp->tx_lanes = l;
	}
	if (l->mem && lane_dead(l))	/* the receiver went: it may be back under that name */
		lane_unmap(ffv_ctx(qp->vqp.qp.context), l);
	if (!l->mem && l->sock < 0 && ffv_now_ns() >= l->retry_at)
		lane_open(qp, l);
	return l->mem || l->sock >= 0 ? l : NULL;
}

/*
 * The rest of a datagram the socket took in part, as far as it takes it:
 * 0 once all of it went, -1 while some waits (or the lane failed: gone).
 */
static int put_pending(struct ffv_context *c, struct ffv_lane *l)
{
	struct ibv_sge rest = { .addr = (uintptr_t)(l->pend + FF_VW_HDR), .length = l->pend_len - FF_VW_HDR };
	int r;

	if (!l->pend)
		return 0;
	r = ffv_frame_write(l->sock, l->pend, &rest, 1, rest.length, &l->pend_off);
	if (r < 0)
		lane_unmap(c, l);	/* the receiver or the link went: ask again next time */
	if (r <= 0)
		return -1;
	free(l->pend);
	l->pend = NULL;
	return 0;
}

/*
 * A datagram as a frame on l's connection: whole, or (the socket full)
 * dropped, as a fabric drops it; a frame the socket took in part is
 * finished first, before any other.
 */
static void wire_send(struct ffv_qp *qp, struct ffv_lane *l, const struct ibv_send_wr *wr, uint32_t total,
		      uint8_t flags, uint32_t qkey)
{
	struct ffv_context *c = ffv_ctx(qp->vqp.qp.context);
	uint8_t h[FF_VW_HDR] = { 0 };
	uint32_t done = 0;
	int r;

	if (put_pending(c, l))
		return;
	h[FF_VW_OP] = wr->opcode == IBV_WR_SEND_WITH_IMM ? FF_VW_SEND_IMM : FF_VW_SEND;
	h[FF_VW_FLAGS] = flags & (FF_VQP_SOLICITED | FF_VQP_GRH);
	memcpy(h + FF_VW_LEN, &total, 4);
	memcpy(h + FF_VW_IMM, &wr->imm_data, 4);
	memcpy(h + FF_VW_RKEY, &qkey, 4);	/* a datagram's Q_Key */
	r = ffv_frame_write(l->sock, h, wr->sg_list, wr->num_sge, total, &done);
	if (r < 0) {
		lane_unmap(c, l);
	} else if (r == 0 && done && (l->pend = malloc(FF_VW_HDR + total))) {
		memcpy(l->pend, h, sizeof(h));
		ffv_gather(l->pend + sizeof(h), wr->sg_list, wr->num_sge, 0, total);
		l->pend_len = FF_VW_HDR + total;
		l->pend_off = done;
		qp->tx_pend = 1;
	} else if (r == 0 && done) {
		lane_unmap(c, l);	/* half a frame and no memory for the rest: the lane cannot go on */
	}
}

int ffv_ud_send(struct ffv_qp *qp, const struct ibv_send_wr *wr, uint32_t total)
{
	const struct ffv_ah *ah = ffv_ah(wr->wr.ud.ah);
	/* A Q_Key with its high bit set means the QP's own (IB spec, 10.2.5). */
	uint32_t qkey = wr->wr.ud.remote_qkey & 0x80000000u ? qp->attr.qkey : wr->wr.ud.remote_qkey;
	uint8_t peer[24], flags = FF_VQP_FIRST | FF_VQP_LAST;
	struct ffv_lane *l;
	long off;

	if (total > UD_MTU)
		return -(int)IBV_WC_LOC_LEN_ERR;
	ffv_peer_name(&ah->attr, wr->wr.ud.remote_qpn, peer);
	if (!(l = tx_lane(qp, peer)))
		return 0;
	if (wr->send_flags & IBV_SEND_SOLICITED)
		flags |= FF_VQP_SOLICITED;
	if (ah->attr.is_global)
		flags |= FF_VQP_GRH;
	if (l->sock >= 0) {
		wire_send(qp, l, wr, total, flags, qkey);
		return 0;
	}
	if ((off = ffv_ring_reserve(l->mem, l->ring, &l->pos, total)) < 0)
		return 0;	/* the receiver is behind: dropped, as a full receive queue drops it */
	ffv_rec_header(l->mem + FF_VQP_HDR_SIZE + off, total,
		       wr->opcode == IBV_WR_SEND_WITH_IMM ? FF_VQP_OP_SEND_IMM : FF_VQP_OP_SEND, flags,
		       wr->imm_data, qkey);
	ffv_gather(l->mem + FF_VQP_HDR_SIZE + off + FF_VQP_REC_HDR, wr->sg_list, wr->num_sge, 0, total);
	l->pos += FF_VQP_REC_HDR + ((total + FF_VQP_REC_ALIGN - 1) & ~(FF_VQP_REC_ALIGN - 1));
	ffv_ring_publish(l->mem, l->pos, l->bell);
	return 0;
}

/* ---- the receiver's side ---- */

void ffv_ud_arm(struct ffv_qp *qp, uint32_t on)
{
	for (struct ffv_lane *l = qp->rx_lanes; l; l = l->next) {
		__atomic_store_n((uint32_t *)(l->mem + FF_VQP_OFF_ARMED), on, __ATOMIC_SEQ_CST);
		lane_watch(ffv_ctx(qp->vqp.qp.context), l, (int)on);
	}
}

int ffv_ud_woke(struct ffv_qp *qp, int fd)
{
	for (struct ffv_lane *l = qp->rx_lanes; l; l = l->next)
		if (l->sock == fd)
			return 1;
	return 0;
}

/*
 * A lane from another host: its datagram frames read from the connection
 * into our ring, as a local sender would produce them, as long as there is
 * room (TCP then holds the rest: a sender whose socket fills drops). At
 * the end of the connection, or a frame that makes no sense, the ring's
 * dead word is set: what came before is still taken.
 */
static void lane_feed(struct ffv_context *c, struct ffv_lane *l)
{
	uint8_t *ring = l->mem + FF_VQP_HDR_SIZE;

	while (l->sock >= 0 && !__atomic_load_n((uint32_t *)(l->mem + FF_VQP_OFF_DEAD), __ATOMIC_RELAXED)) {
		uint32_t len, qkey, imm;
		ssize_t r;

		if (l->fhave < FF_VW_HDR) {
			r = recv(l->sock, l->fhdr + l->fhave, FF_VW_HDR - l->fhave, MSG_DONTWAIT);
		} else {
			if (l->foff < 0 && (l->foff = ffv_ring_reserve(l->mem, l->ring, &l->fprod, l->fleft)) < 0) {
				lane_watch(c, l, 0);	/* the receiver is behind: watched again once it took some */
				return;
			}
			memcpy(&len, l->fhdr + FF_VW_LEN, 4);
			r = l->fleft ? recv(l->sock, ring + l->foff + FF_VQP_REC_HDR + (len - l->fleft), l->fleft,
					    MSG_DONTWAIT) : 0;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			return;
		if (r <= 0 && !(l->fhave == FF_VW_HDR && !l->fleft)) {
			__atomic_store_n((uint32_t *)(l->mem + FF_VQP_OFF_DEAD), FF_VQP_DEAD_GONE, __ATOMIC_RELEASE);
			lane_watch(c, l, 0);	/* the end stays readable: never again */
			return;
		}
		if (l->fhave < FF_VW_HDR) {
			l->fhave += (uint32_t)r;
			if (l->fhave < FF_VW_HDR)
				continue;
			memcpy(&len, l->fhdr + FF_VW_LEN, 4);
			if ((l->fhdr[FF_VW_OP] != FF_VW_SEND && l->fhdr[FF_VW_OP] != FF_VW_SEND_IMM) ||
			    len > UD_MTU) {
				/* The sender broke its own lane: it ends here; what came before is taken. */
				__atomic_store_n((uint32_t *)(l->mem + FF_VQP_OFF_DEAD), FF_VQP_DEAD_GONE, __ATOMIC_RELEASE);
				lane_watch(c, l, 0);
				return;
			}
			l->fleft = len;
			l->foff = -1;
			continue;
		}
		l->fleft -= (uint32_t)r;
		if (l->fleft)
			continue;
		memcpy(&len, l->fhdr + FF_VW_LEN, 4);
		memcpy(&imm, l->fhdr + FF_VW_IMM, 4);
		memcpy(&qkey, l->fhdr + FF_VW_RKEY, 4);
		ffv_rec_header(ring + l->foff, len,
			       l->fhdr[FF_VW_OP] == FF_VW_SEND_IMM ? FF_VQP_OP_SEND_IMM : FF_VQP_OP_SEND,
			       FF_VQP_FIRST | FF_VQP_LAST | (l->fhdr[FF_VW_FLAGS] & (FF_VQP_SOLICITED | FF_VQP_GRH)),
			       imm, qkey);
		l->fprod += FF_VQP_REC_HDR + ffv_round16(len);
		ffv_ring_publish(l->mem, l->fprod, -1);
		l->fhave = 0;
		l->foff = -1;
	}
}

/* ctx->mu held: one answer's lanes (VERBS_LANES and their fds) mapped; how many it named. */
static int add_lanes(struct ffv_qp *qp, const struct ff_attr *a, int *fds, int nfds)
{
	uint32_t armed = __atomic_load_n((uint32_t *)(qp->mem + FF_VQP_OFF_ARMED), __ATOMIC_RELAXED);
	int n = a ? (int)(a->len / 28) : 0;
	struct ffv_lane **tail = &qp->rx_lanes;

	while (*tail)
		tail = &(*tail)->next;
	for (int i = 0; i < n && i < nfds; i++) {
		struct ffv_lane *l = calloc(1, sizeof(*l));
		struct stat st;

		if (l && fstat(fds[i], &st) == 0 && S_ISSOCK(st.st_mode)) {
			/* From another host: its connection, read into a ring of our own. */
			int rfd;

			l->ring = LANE_RING;
			l->foff = -1;
			l->sock = fcntl(fds[i], F_DUPFD_CLOEXEC, 0);
			if (l->sock < 0 || ffv_wire_socket(l->sock) || ffv_ring_make(LANE_RING, &rfd, &l->mem)) {
				if (l->sock >= 0)
					close(l->sock);
				free(l);
				continue;
			}
			close(rfd);
		} else if (!l || ffv_ring_map(fds[i], &l->mem, &l->ring)) {
			free(l);	/* a lane we cannot map: its datagrams are lost */
			continue;
		} else {
			l->sock = -1;
		}
		memcpy(&l->id, a->val + 28 * i, 4);
		memcpy(l->peer, a->val + 28 * i + 4, 24);
		l->bell = -1;
		l->pos = __atomic_load_n((uint64_t *)(l->mem + FF_VQP_OFF_CONS), __ATOMIC_RELAXED);
		/* Armed as the QP's other lanes, before it is first read (events.c, "No lost wake-up"). */
		__atomic_store_n((uint32_t *)(l->mem + FF_VQP_OFF_ARMED), armed, __ATOMIC_SEQ_CST);
		lane_watch(ffv_ctx(qp->vqp.qp.context), l, armed != 0);
		*tail = l;	/* after the older lanes: their datagrams came first */
		tail = &l->next;
		if (l->id >= qp->next_lane)
			qp->next_lane = l->id + 1;
	}
	return n;
}

/* ctx->mu held: VERBS_UD_LANES until the agent has named every new lane. */
static void fetch_lanes(struct ffv_qp *qp)
{
	struct ffv_context *c = ffv_ctx(qp->vqp.qp.context);
	uint8_t buf[1024];
	int fds[LANES_PER_ASK], nfds, n;
	struct ff_enc e;
	struct ff_msg m;

	do {
		ff_enc_start(&e, buf, sizeof(buf), FF_MSG_VERBS_UD_LANES, ffv_next_seq(c));
		ff_enc_u32(&e, FF_ATTR_QPN, qp->vqp.qp.qp_num);
		ff_enc_u32(&e, FF_ATTR_OFFSET, qp->next_lane ? qp->next_lane : 1);
		nfds = LANES_PER_ASK;
		if ((n = ff_enc_finish(&e)) < 0 ||
		    ffv_agent_call(c, buf, n, NULL, 0, &m, sizeof(buf), fds, &nfds) || m.type != FF_MSG_OK)
			return;
		n = add_lanes(qp, ff_msg_get(&m, FF_ATTR_VERBS_LANES), fds, nfds);
		while (nfds > 0)
			close(fds[--nfds]);
	} while (n == LANES_PER_ASK);
}

/* The 40 bytes a GRH takes at the head of a UD receive: IPv6's header, as IB's GRH is. */
static void grh(uint8_t out[GRH_SIZE], const struct ffv_qp *qp, const struct ffv_lane *l, uint32_t len)
{
	uint32_t vtf = htonl(6u << 28);
	uint16_t paylen = htons((uint16_t)len);

	memcpy(out, &vtf, 4);
	memcpy(out + 4, &paylen, 2);
	out[6] = 0x1b;	/* next header: IB's BTH */
	out[7] = 1;	/* hop limit */
	memcpy(out + 8, l->peer + 8, 16);
	memcpy(out + 24, ffv_dev(qp->vqp.qp.context->device)->gid, 16);
}

/*
 * One datagram of lane l (its record header h, payload p) into a posted
 * receive; 0, or -1 when no receive is posted (it waits in the lane).
 */
static int deliver(struct ffv_qp *qp, const struct ffv_lane *l, const uint8_t *h, const uint8_t *p)
{
	struct ffv_context *c = ffv_ctx(qp->vqp.qp.context);
	uint32_t len, imm, qkey;
	uint16_t slid;
	struct ffv_rwqe *w;
	struct ibv_wc wc = { .opcode = IBV_WC_RECV, .qp_num = qp->vqp.qp.qp_num };

	memcpy(&len, h + FF_VQP_REC_LEN, 4);
	memcpy(&imm, h + FF_VQP_REC_IMM, 4);
	memcpy(&qkey, h + FF_VQP_REC_TOTAL, 4);
	if (qkey != qp->attr.qkey)
		return 0;	/* the wrong Q_Key: dropped, as the IB spec drops it */
	if (!(w = ffv_rx_next(qp)))
		return -1;
	wc.wr_id = w->wr_id;
	memcpy(&wc.src_qp, l->peer, 4);
	memcpy(&slid, l->peer + 4, 2);
	wc.slid = slid;
	wc.byte_len = GRH_SIZE + len;
	if (!ffv_rwqe_writable(c, w)) {
		wc.status = IBV_WC_LOC_PROT_ERR;
	} else if (w->room < GRH_SIZE + len) {
		wc.status = IBV_WC_LOC_LEN_ERR;
	} else {
		if (h[FF_VQP_REC_FLAGS] & FF_VQP_GRH) {
			uint8_t g[GRH_SIZE];

			grh(g, qp, l, len);
			ffv_scatter(w->sge, w->num_sge, 0, g, GRH_SIZE);
			wc.wc_flags |= IBV_WC_GRH;
		}
		ffv_scatter(w->sge, w->num_sge, GRH_SIZE, p, len);
	}
	if (h[FF_VQP_REC_OP] == FF_VQP_OP_SEND_IMM) {
		wc.imm_data = imm;
		wc.wc_flags |= IBV_WC_WITH_IMM;
	}
	free(w);
	if (ffv_cq_push(qp->rcq, &wc, (h[FF_VQP_REC_FLAGS] & FF_VQP_SOLICITED) != 0) ||
	    wc.status != IBV_WC_SUCCESS)
		ffv_qp_error(qp);
	return 0;
}

/* The lanes the agent gave us since we last asked (its lanes word moved), fetched. */
static void new_lanes(struct ffv_qp *qp)
{
	uint32_t gen = __atomic_load_n((uint32_t *)(qp->mem + FF_VQP_OFF_LANES), __ATOMIC_ACQUIRE);

	if (gen != qp->lanes_seen) {
		qp->lanes_seen = gen;
		fetch_lanes(qp);
	}
}

/*
 * The datagrams of lane l into posted receives. A record that makes no
 * sense breaks that lane only: its sender broke its own datagrams.
 */
static void take_lane(struct ffv_qp *qp, struct ffv_lane *l)
{
	uint64_t prod = __atomic_load_n((uint64_t *)(l->mem + FF_VQP_OFF_PROD), __ATOMIC_ACQUIRE);
	const uint8_t *ring = l->mem + FF_VQP_HDR_SIZE;
	uint64_t start = l->pos;

	while (!l->broken && l->pos != prod && qp->vqp.qp.state != IBV_QPS_ERR) {
		uint64_t avail = prod - l->pos;
		uint32_t off = (uint32_t)(l->pos & (l->ring - 1)), len, rec;
		const uint8_t *h = ring + off;
		uint8_t op = h[FF_VQP_REC_OP], flags = h[FF_VQP_REC_FLAGS];

		memcpy(&len, h + FF_VQP_REC_LEN, 4);
		rec = FF_VQP_REC_HDR + ((len + FF_VQP_REC_ALIGN - 1) & ~(FF_VQP_REC_ALIGN - 1));
		if (avail > l->ring || len > l->ring || rec > avail || off + rec > l->ring ||
		    (op != FF_VQP_OP_PAD &&
		     ((op != FF_VQP_OP_SEND && op != FF_VQP_OP_SEND_IMM) || len > UD_MTU ||
		      (flags & (FF_VQP_FIRST | FF_VQP_LAST)) != (FF_VQP_FIRST | FF_VQP_LAST)))) {
			l->broken = 1;
			break;
		}
		if (op != FF_VQP_OP_PAD && deliver(qp, l, h, h + FF_VQP_REC_HDR) < 0)
			break;	/* no receive posted: it waits */
		l->pos += rec;
	}
	if (l->pos != start)
		__atomic_store_n((uint64_t *)(l->mem + FF_VQP_OFF_CONS), l->pos, __ATOMIC_RELEASE);
}

void ffv_ud_take(struct ffv_qp *qp)
{
	if (qp->taking || (qp->vqp.qp.state != IBV_QPS_RTR && qp->vqp.qp.state != IBV_QPS_RTS))
		return;	/* taking: a completion inside made the QP fail, and its flush comes here */
	qp->taking = 1;
	qp->rx_starved = 0;
	/* A datagram the socket took in part goes on when the program polls, not only at its next send. */
	if (qp->tx_pend) {
		qp->tx_pend = 0;
		for (struct ffv_lane *l = qp->tx_lanes; l; l = l->next)
			if (put_pending(ffv_ctx(qp->vqp.qp.context), l) && l->pend)
				qp->tx_pend = 1;
	}
	new_lanes(qp);
	for (struct ffv_lane **pp = &qp->rx_lanes; *pp;) {
		struct ffv_lane *l = *pp;
		int dead;

		lane_feed(ffv_ctx(qp->vqp.qp.context), l);
		dead = lane_dead(l);	/* before the last look: what it published before dying is taken */
		take_lane(qp, l);
		/* Room made, the receiver asleep on its armed CQ: its connection watched again. */
		if (!dead && l->sock >= 0 && __atomic_load_n((uint32_t *)(l->mem + FF_VQP_OFF_ARMED), __ATOMIC_RELAXED))
			lane_watch(ffv_ctx(qp->vqp.qp.context), l, 1);
		if (dead && (l->broken ||
			     l->pos == __atomic_load_n((uint64_t *)(l->mem + FF_VQP_OFF_PROD), __ATOMIC_ACQUIRE))) {
			*pp = l->next;
			lane_free(ffv_ctx(qp->vqp.qp.context), l);
			continue;
		}
		pp = &l->next;
	}
	qp->taking = 0;
}

#define DROP_PASSES	16

void ffv_ud_drop(struct ffv_qp *qp)
{
	struct ffv_context *c = ffv_ctx(qp->vqp.qp.context);

	new_lanes(qp);	/* lanes given while it was not ready hold datagrams too */
	for (struct ffv_lane *l = qp->rx_lanes; l; l = l->next) {
		uint64_t prod;

		/*
		 * A connection's frames are read into the ring as far as it has
		 * room, then skipped; DROP_PASSES rings at most, so a sender that
		 * never pauses cannot hold this call: what comes later is the
		 * ready QP's.
		 */
		for (int pass = 0; pass < DROP_PASSES; pass++) {
			lane_feed(c, l);
			prod = __atomic_load_n((uint64_t *)(l->mem + FF_VQP_OFF_PROD), __ATOMIC_ACQUIRE);
			if (prod == l->pos)
				break;
			l->pos = prod;
			__atomic_store_n((uint64_t *)(l->mem + FF_VQP_OFF_CONS), l->pos, __ATOMIC_RELEASE);
			if (l->sock < 0)
				break;
		}
	}
}
