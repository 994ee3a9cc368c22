/* SPDX-License-Identifier: MIT */
/*
 * Queue pairs: made with their incoming ring (a memfd, registered with the
 * agent, which numbers the QP), moved through the state machine as a NIC
 * moves them (a transition or attribute mask the IB spec forbids fails with
 * EINVAL), connected to their peer at RTR through the agent.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "freeflow/proto.h"
#include "verbs/verbs.h"

/* Each RC QP's incoming ring (untouched pages cost nothing): a peer across hosts counts on its size. */
#define RING_SIZE	FF_VW_RING
#define MAX_WR		16384
#define MAX_SGE		32
#define MAX_INLINE	4096

int ffv_ring_make(uint32_t ring, int *fd, uint8_t **mem)
{
	size_t size = FF_VQP_HDR_SIZE + ring;
	uint32_t hdr[3] = { FF_VQP_MAGIC, FF_VQP_VERSION, ring };
	int err;

	*mem = NULL;
	*fd = memfd_create("ffv-qp", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (*fd < 0)
		return -errno;
	if (ftruncate(*fd, size) < 0 || fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
		goto fail;
	*mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
	if (*mem == MAP_FAILED)
		goto fail;
	memcpy(*mem, hdr, sizeof(hdr));
	return 0;
fail:
	err = -errno;
	*mem = NULL;
	close(*fd);
	*fd = -1;
	return err;
}

static int make_ring(struct ffv_qp *qp)
{
	/* A UD QP's datagrams arrive in its senders' lanes (ud.c): its own ring stays empty. */
	qp->ring_size = qp->vqp.qp.qp_type == IBV_QPT_UD ? FF_VQP_RING_MIN : RING_SIZE;
	return ffv_ring_make(qp->ring_size, &qp->memfd, &qp->mem);
}

/*
 * ctx->mu held: VERBS_QP_CREATE, with our doorbell if belled or RC (the
 * agent rings it when the peer connects back: a QP asleep, or passive,
 * then asks for its peer); the agent's QPN into qp.
 */
static int register_qp(struct ffv_context *c, struct ffv_qp *qp)
{
	uint8_t buf[256], val[8];
	uint32_t type = qp->vqp.qp.qp_type, pd = qp->pd->num;
	const struct ff_attr *qpn;
	int fds[2] = { qp->memfd, -1 };
	struct ff_enc e;
	struct ff_msg m;
	int n, rn = 0, err;

	memcpy(val, &type, 4), memcpy(val + 4, &pd, 4);
	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_VERBS_QP_CREATE, ffv_next_seq(c));
	ff_enc_attr(&e, FF_ATTR_VERBS_QP, val, sizeof(val));
	n = ff_enc_finish(&e);
	if (n < 0)
		return n;
	if ((qp->belled || type == IBV_QPT_RC) && (err = ffv_events_start(c)))
		return err;
	fds[1] = c->bell[1];
	err = ffv_agent_call(c, buf, n, fds, qp->belled || type == IBV_QPT_RC ? 2 : 1, &m, sizeof(buf),
			     NULL, &rn);
	if (err)
		return err > 0 ? (err == FF_ERR_LIMIT ? -ENOMEM : -EPERM) : err;
	if (m.type != FF_MSG_OK || !(qpn = ff_msg_get(&m, FF_ATTR_QPN)))
		return -EPROTO;
	qp->vqp.qp.qp_num = ff_attr_u32(qpn);
	return 0;
}

static void free_qp(struct ffv_qp *qp)
{
	ffv_ud_free(qp);
	ffv_wire_close(qp);
	if (qp->mem)
		munmap(qp->mem, FF_VQP_HDR_SIZE + qp->ring_size);
	if (qp->peer_mem)
		munmap(qp->peer_mem, FF_VQP_HDR_SIZE + qp->peer_ring);
	if (qp->memfd >= 0)
		close(qp->memfd);
	if (qp->peer_bell >= 0)
		close(qp->peer_bell);
	ffv_rq_free(&qp->rq);
	free(qp->rx_wqe);
	while (qp->sq) {
		struct ffv_swqe *w = qp->sq;

		qp->sq = w->next;
		free(w);
	}
	free(qp);
}

struct ibv_qp *ffv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ffv_context *c = ffv_ctx(pd->context);
	struct ibv_qp_cap *cap = &attr->cap;
	struct ffv_qp *qp;
	int err;

	if (attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UD) {
		errno = EOPNOTSUPP;	/* UC, XRC, raw packet: not (docs/VERBS.md) */
		return NULL;
	}
	if (!attr->send_cq || !attr->recv_cq || (attr->srq && attr->srq->context != pd->context) ||
	    cap->max_send_wr > MAX_WR ||
	    cap->max_recv_wr > MAX_WR || cap->max_send_sge > MAX_SGE ||
	    cap->max_recv_sge > MAX_SGE || cap->max_inline_data > MAX_INLINE) {
		errno = EINVAL;
		return NULL;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp)
		return NULL;
	qp->memfd = -1;
	qp->peer_bell = -1;
	qp->vqp.qp.qp_type = attr->qp_type;
	qp->pd = ffv_pd(pd);
	qp->scq = ffv_cq(attr->send_cq);
	qp->rcq = ffv_cq(attr->recv_cq);
	/* Its CQs' channels started the context's doorbell (events.c). */
	qp->belled = qp->scq->chan >= 0 || qp->rcq->chan >= 0;
	qp->sq_sig_all = attr->sq_sig_all;
	cap->max_send_wr = cap->max_send_wr ? cap->max_send_wr : 1;
	cap->max_send_sge = cap->max_send_sge ? cap->max_send_sge : 1;
	/* With an SRQ, no receive queue of its own (and none reported, as mlx5). */
	qp->srq = attr->srq ? ffv_srq(attr->srq) : NULL;
	cap->max_recv_wr = qp->srq ? 0 : cap->max_recv_wr ? cap->max_recv_wr : 1;
	cap->max_recv_sge = qp->srq ? 0 : cap->max_recv_sge ? cap->max_recv_sge : 1;
	cap->max_inline_data = MAX_INLINE;
	qp->cap = *cap;
	qp->sq_tail = &qp->sq;
	err = qp->srq ? 0 : ffv_rq_init(&qp->rq, cap->max_recv_wr, cap->max_recv_sge);
	if (!err)
		err = make_ring(qp);
	if (!err && qp->srq)	/* its receives are the SRQ's: a peer never waits on our count */
		__atomic_store_n((uint64_t *)(qp->mem + FF_VQP_OFF_RQ_POSTED), UINT64_MAX, __ATOMIC_RELAXED);
	ffv_lock(c);
	if (!err)
		err = register_qp(c, qp);
	if (!err) {
		qp->next = c->qps;
		c->qps = qp;
		/* Its receive CQ armed already: its peers ring from the first record on. */
		if (qp->belled && qp->rcq->armed)
			__atomic_store_n((uint32_t *)(qp->mem + FF_VQP_OFF_ARMED), 1, __ATOMIC_SEQ_CST);
	}
	pthread_mutex_unlock(&c->mu);
	if (err) {
		free_qp(qp);
		errno = -err;
		return NULL;
	}
	qp->vqp.qp.context = pd->context;
	qp->vqp.qp.qp_context = attr->qp_context;
	qp->vqp.qp.pd = pd;
	qp->vqp.qp.send_cq = attr->send_cq;
	qp->vqp.qp.recv_cq = attr->recv_cq;
	qp->vqp.qp.srq = attr->srq;
	qp->vqp.qp.state = IBV_QPS_RESET;
	pthread_mutex_init(&qp->vqp.qp.mutex, NULL);
	pthread_cond_init(&qp->vqp.qp.cond, NULL);
	qp->attr.qp_state = IBV_QPS_RESET;
	qp->attr.cap = qp->cap;
	return &qp->vqp.qp;
}

int ffv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask,
		 struct ibv_qp_init_attr *init)
{
	struct ffv_context *c = ffv_ctx(ibqp->context);
	struct ffv_qp *qp = ffv_qp(ibqp);

	(void)mask;
	ffv_lock(c);
	*attr = qp->attr;
	attr->qp_state = attr->cur_qp_state = ibqp->state;
	attr->cap = qp->cap;
	memset(init, 0, sizeof(*init));
	init->qp_context = ibqp->qp_context;
	init->send_cq = ibqp->send_cq;
	init->recv_cq = ibqp->recv_cq;
	init->srq = ibqp->srq;
	init->cap = qp->cap;
	init->qp_type = ibqp->qp_type;
	init->sq_sig_all = qp->sq_sig_all;
	pthread_mutex_unlock(&c->mu);
	return 0;
}

/* The attributes a transition requires (IB spec, table "QP state transition properties"). */
static int required(enum ibv_qp_type type, enum ibv_qp_state from, enum ibv_qp_state to)
{
	if (type == IBV_QPT_UD) {
		if (from == IBV_QPS_RESET && to == IBV_QPS_INIT)
			return IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
		return from == IBV_QPS_RTR && to == IBV_QPS_RTS ? IBV_QP_SQ_PSN : 0;
	}
	if (from == IBV_QPS_RESET && to == IBV_QPS_INIT)
		return IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	if (from == IBV_QPS_INIT && to == IBV_QPS_RTR)
		return IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
		       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	if (from == IBV_QPS_RTR && to == IBV_QPS_RTS)
		return IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
		       IBV_QP_MAX_QP_RD_ATOMIC;
	return 0;
}

static int allowed(enum ibv_qp_state from, enum ibv_qp_state to)
{
	if (to == IBV_QPS_RESET || to == IBV_QPS_ERR)
		return 1;
	switch (from) {
	case IBV_QPS_RESET: return to == IBV_QPS_INIT;
	case IBV_QPS_INIT: return to == IBV_QPS_INIT || to == IBV_QPS_RTR;
	case IBV_QPS_RTR: return to == IBV_QPS_RTS;
	case IBV_QPS_RTS: return to == IBV_QPS_RTS || to == IBV_QPS_SQD;
	case IBV_QPS_SQD: return to == IBV_QPS_RTS || to == IBV_QPS_SQD;
	case IBV_QPS_SQE: return to == IBV_QPS_RTS;
	default: return 0;
	}
}

/*
 * ctx->mu held, an RC QP going back to RESET after it was connected: a new
 * ring for its next connection. The peer it was connected to keeps the old
 * one mapped and may still produce into it (its program has not reset it
 * yet, or never does), as packets still come to a NIC's QP in RESET, which
 * drops them; so the agent swaps the memfds (VERBS_QP_RESET), marks the old
 * one FF_VQP_DEAD_RESET (its producer's requests fail as to a QP that stopped
 * answering) and forgets the pair both ways: each end gets the other's new
 * ring only once both connected again. The words we own come along. 0, or
 * a positive errno (no memory for the new ring) with the QP as it was.
 */
static int renew_ring(struct ffv_qp *qp)
{
	static const uint32_t words[] = { FF_VQP_OFF_ACCESS, FF_VQP_OFF_MR_GEN, FF_VQP_OFF_ARMED,
					  FF_VQP_OFF_RNR_TIMER };
	struct ffv_context *c = ffv_ctx(qp->vqp.qp.context);
	uint8_t buf[256], *mem;
	struct ff_enc e;
	struct ff_msg m;
	int fd, n, rn = 0, err;

	if ((err = ffv_ring_make(qp->ring_size, &fd, &mem)))
		return -err;
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		memcpy(mem + words[i], qp->mem + words[i], 4);
	if (qp->srq)	/* as create_qp: a peer never waits on our count */
		memset(mem + FF_VQP_OFF_RQ_POSTED, 0xff, 8);
	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_VERBS_QP_RESET, ffv_next_seq(c));
	ff_enc_u32(&e, FF_ATTR_QPN, qp->vqp.qp.qp_num);
	n = ff_enc_finish(&e);
	err = n < 0 ? n : ffv_agent_call(c, buf, n, &fd, 1, &m, sizeof(buf), NULL, &rn);
	if (err) {
		/*
		 * No agent to take it (restarted, gone, at its limit): the reset
		 * happens all the same, as a NIC's never fails, on the new ring.
		 * The old one is marked as the agent would, so what its producer
		 * still sends fails; the agent, still holding it as the QP's, hands
		 * it to whoever connects next: the reconnect fails, not the reset.
		 */
		__atomic_store_n((uint32_t *)(qp->mem + FF_VQP_OFF_DEAD), FF_VQP_DEAD_RESET, __ATOMIC_RELEASE);
		if (ffv_debug_on())
			fprintf(stderr, "libffv: QP %#x reset without the agent (%d): it cannot connect again\n",
				qp->vqp.qp.qp_num, err);
	}
	munmap(qp->mem, FF_VQP_HDR_SIZE + qp->ring_size);
	close(qp->memfd);
	qp->mem = mem;
	qp->memfd = fd;
	qp->ring_out = 0;
	return 0;
}

/* ctx->mu held: back to RESET: posted requests are dropped without completions, as a NIC does. */
static void reset(struct ffv_qp *qp)
{
	ffv_rq_clear(&qp->rq);
	free(qp->rx_wqe);	/* the one taken from an SRQ too: a NIC's reset drops it */
	qp->rx_wqe = NULL;
	qp->rx_off = 0;
	qp->rx_starved = 0;
	qp->tx_prod = 0;
	qp->peer_cons = 0;
	qp->tx_msgs = 0;
	qp->rnr_by = 0;
	/* No retry budget runs on (the event thread would tick for it for ever), no broken ring is kept. */
	qp->reach_by = 0;
	qp->reach_next = 0;
	qp->rx_broken = 0;
	qp->rx_cons = 0;
	if (!qp->srq) {
		qp->rq_posted = 0;
		__atomic_store_n((uint64_t *)(qp->mem + FF_VQP_OFF_RQ_POSTED), 0, __ATOMIC_RELEASE);
	}
	__atomic_store_n((uint64_t *)(qp->mem + FF_VQP_OFF_CONS), 0, __ATOMIC_RELEASE);
	while (qp->sq) {
		struct ffv_swqe *w = qp->sq;

		qp->sq = w->next;
		free(w);
	}
	qp->sq_tail = &qp->sq;
	qp->sq_count = 0;
	/* Our waiting word in the ring we leave asks its owner for nothing more. */
	if (qp->peer_mem && qp->waiting)
		__atomic_store_n((uint32_t *)(qp->peer_mem + FF_VQP_OFF_WAITING), 0, __ATOMIC_RELEASE);
	if (qp->peer_mem)
		munmap(qp->peer_mem, FF_VQP_HDR_SIZE + qp->peer_ring);
	qp->peer_mem = NULL;
	if (qp->peer_bell >= 0)
		close(qp->peer_bell);
	qp->peer_bell = -1;
	qp->waiting = 0;
	ffv_wire_close(qp);
}

int ffv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask)
{
	struct ffv_context *c = ffv_ctx(ibqp->context);
	struct ffv_qp *qp = ffv_qp(ibqp);
	enum ibv_qp_state from, to;
	int err;

	ffv_lock(c);
	from = mask & IBV_QP_CUR_STATE ? attr->cur_qp_state : ibqp->state;
	to = mask & IBV_QP_STATE ? attr->qp_state : from;
	if (from != ibqp->state || !allowed(from, to) ||
	    (mask & required(ibqp->qp_type, from, to)) != required(ibqp->qp_type, from, to) ||
	    (mask & IBV_QP_PORT && attr->port_num != 1) ||
	    (mask & IBV_QP_PKEY_INDEX && attr->pkey_index != 0)) {
		pthread_mutex_unlock(&c->mu);
		return EINVAL;
	}
	if (to == IBV_QPS_RESET && qp->ring_out && (err = renew_ring(qp))) {
		pthread_mutex_unlock(&c->mu);
		return err;
	}
	if (mask & IBV_QP_ACCESS_FLAGS) {
		qp->attr.qp_access_flags = attr->qp_access_flags;
		/* What one-sided requests from the peer may do through this QP (post.c checks). */
		__atomic_store_n((uint32_t *)(qp->mem + FF_VQP_OFF_ACCESS),
				 (uint32_t)attr->qp_access_flags, __ATOMIC_RELEASE);
	}
	if (mask & IBV_QP_PORT)
		qp->attr.port_num = attr->port_num;
	if (mask & IBV_QP_QKEY)
		qp->attr.qkey = attr->qkey;
	if (mask & IBV_QP_AV)
		qp->attr.ah_attr = attr->ah_attr;
	if (mask & IBV_QP_PATH_MTU)
		qp->attr.path_mtu = attr->path_mtu;
	if (mask & IBV_QP_DEST_QPN) {
		qp->attr.dest_qp_num = attr->dest_qp_num;
		qp->peer_qpn = attr->dest_qp_num;	/* the src_qp of what arrives */
	}
	if (mask & IBV_QP_RQ_PSN)
		qp->attr.rq_psn = attr->rq_psn;
	if (mask & IBV_QP_SQ_PSN)
		qp->attr.sq_psn = attr->sq_psn;
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		qp->attr.max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		qp->attr.max_rd_atomic = attr->max_rd_atomic;
	if (mask & IBV_QP_MIN_RNR_TIMER) {
		qp->attr.min_rnr_timer = attr->min_rnr_timer;
		/* The timer a peer below rnr_retry 7 waits by (post.c, rnr_check). */
		__atomic_store_n((uint32_t *)(qp->mem + FF_VQP_OFF_RNR_TIMER), attr->min_rnr_timer,
				 __ATOMIC_RELAXED);
	}
	if (mask & IBV_QP_TIMEOUT)
		qp->attr.timeout = attr->timeout;
	if (mask & IBV_QP_RETRY_CNT)
		qp->attr.retry_cnt = attr->retry_cnt;
	if (mask & IBV_QP_RNR_RETRY)
		qp->attr.rnr_retry = attr->rnr_retry;
	ibqp->state = to;
	qp->attr.qp_state = to;
	if (to == IBV_QPS_RESET)
		reset(qp);
	else if (to == IBV_QPS_ERR && from != IBV_QPS_ERR)
		ffv_qp_error(qp);
	else if (to == IBV_QPS_RTR && ibqp->qp_type == IBV_QPT_UD)
		ffv_ud_drop(qp);
	else if (to == IBV_QPS_RTR && ibqp->qp_type == IBV_QPT_RC) {
		qp->ring_out = 1;
		ffv_qp_connect(qp);	/* the peer may not exist yet: the first send asks again */
	}
	pthread_mutex_unlock(&c->mu);
	return 0;
}

void ffv_peer_name(const struct ibv_ah_attr *ah, uint32_t qpn, uint8_t val[24])
{
	static const uint8_t v4mapped[12] = { [10] = 0xff, [11] = 0xff };
	const uint8_t *gid = ah->grh.dgid.raw;
	uint16_t lid = ah->dlid;

	memset(val, 0, 24);
	memcpy(val, &qpn, 4);
	if (ah->is_global && !memcmp(gid, v4mapped, 12))
		lid = (uint16_t)(gid[14] << 8 | gid[15]);
	else if (ah->is_global)
		lid = 0;
	memcpy(val + 4, &lid, 2);
	if (!lid)
		memcpy(val + 8, gid, 16);
}

int ffv_ring_map(int fd, uint8_t **mem, uint32_t *ring)
{
	struct stat st;
	uint32_t size, hdr[2];
	uint8_t *m;

	if (fstat(fd, &st) < 0 || st.st_size <= FF_VQP_HDR_SIZE)
		return -EPROTO;
	size = (uint32_t)(st.st_size - FF_VQP_HDR_SIZE);
	if (st.st_size > FF_VQP_HDR_SIZE + FF_VQP_RING_MAX || size < FF_VQP_RING_MIN ||
	    (size & (size - 1)))
		return -EPROTO;
	m = mmap(NULL, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		return -errno;
	memcpy(hdr, m, sizeof(hdr));
	if (hdr[0] != FF_VQP_MAGIC || hdr[1] != FF_VQP_VERSION) {
		munmap(m, st.st_size);
		return -EPROTO;
	}
	*mem = m;
	*ring = size;
	return 0;
}

enum ibv_wc_status ffv_qp_connect(struct ffv_qp *qp)
{
	struct ffv_context *c = ffv_ctx(qp->vqp.qp.context);
	uint8_t buf[256], val[24];
	const struct ff_attr *qpn, *kind;
	int fds[2], nfds = 2, n, err;
	struct ff_enc e;
	struct ff_msg m;

	if (ffv_reached(qp))
		return IBV_WC_SUCCESS;
	ffv_peer_name(&qp->attr.ah_attr, qp->attr.dest_qp_num, val);
	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_VERBS_CONNECT, ffv_next_seq(c));
	ff_enc_u32(&e, FF_ATTR_QPN, qp->vqp.qp.qp_num);
	ff_enc_attr(&e, FF_ATTR_VERBS_PEER, val, sizeof(val));
	n = ff_enc_finish(&e);
	if (n < 0)
		return IBV_WC_GENERAL_ERR;
	err = ffv_agent_call(c, buf, n, NULL, 0, &m, sizeof(buf), fds, &nfds);
	if (err)	/* no such QP (yet), another tenant's, or no agent: as an unreachable peer */
		return IBV_WC_RETRY_EXC_ERR;
	qpn = ff_msg_get(&m, FF_ATTR_QPN);
	kind = ff_msg_get(&m, FF_ATTR_PATH_KIND);
	if (m.type != FF_MSG_VERBS_PEER_QP || nfds < 1 || !qpn)
		goto bad;
	if (kind && kind->len == 1 && kind->val[0] == FF_PATH_HOST_TCP) {
		/* On another host: one fd, the connection to the peer's provider (wire.c). */
		if (nfds != 1 || ffv_wire_attach(qp, fds[0]))
			goto bad;
		qp->peer_qpn = ff_attr_u32(qpn);
		return IBV_WC_SUCCESS;
	}
	/* On this host: the peer's memfd, and its doorbell if a CQ of it has a channel. */
	if (ffv_ring_map(fds[0], &qp->peer_mem, &qp->peer_ring))
		goto bad;
	close(fds[0]);
	if (qp->peer_bell >= 0)
		close(qp->peer_bell);
	qp->peer_bell = nfds == 2 ? fds[1] : -1;
	qp->peer_qpn = ff_attr_u32(qpn);
	return IBV_WC_SUCCESS;
bad:
	while (nfds > 0)
		close(fds[--nfds]);
	return IBV_WC_GENERAL_ERR;
}

int64_t ffv_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/*
 * How long a NIC would retry a peer that does not answer: 4.096 µs << the
 * QP's timeout, retry_cnt + 1 times; at least 100 ms (a program may post as
 * soon as it is in RTS, its peer a moment later), at most 10 s (timeout 0
 * is "for ever" on a NIC).
 */
static int64_t retry_budget_ns(const struct ffv_qp *qp)
{
	int64_t t = qp->attr.timeout && qp->attr.timeout < 31 ? 4096LL << qp->attr.timeout : 10000000000LL;

	t *= qp->attr.retry_cnt + 1;
	return t < 100000000 ? 100000000 : t > 10000000000LL ? 10000000000LL : t;
}

/* Ask the agent again at most this often while a peer has not connected back. */
#define REACH_EVERY_NS	1000000

/*
 * A NIC retries on its own: so does the event thread, while the program
 * makes no verbs call. Its doorbell when the budget starts (started), so
 * that a thread asleep with no clock takes one (events.c).
 */
static void retry_on_own(struct ffv_qp *qp, int started)
{
	struct ffv_context *c = ffv_ctx(qp->vqp.qp.context);

	if (ffv_events_start(c) == 0 && started)
		ffv_ring(c->bell[1]);
}

int ffv_qp_reach(struct ffv_qp *qp)
{
	int64_t now = ffv_now_ns();
	int started = !qp->reach_by;
	enum ibv_wc_status st;

	/*
	 * The budget starts with the first request that needs the peer, even
	 * when a poll asked the agent a moment ago (ffv_progress shares
	 * reach_next): the event thread goes on with it by the clock.
	 */
	if (!qp->reach_by)
		qp->reach_by = now + retry_budget_ns(qp);
	if (now >= qp->reach_next) {
		st = ffv_qp_connect(qp);
		if (st == IBV_WC_SUCCESS || now >= qp->reach_by) {
			qp->reach_by = qp->reach_next = 0;
			return st;
		}
		qp->reach_next = now + REACH_EVERY_NS;
	}
	retry_on_own(qp, started);
	return FFV_REACH_LATER;
}

static void flush_recv(struct ffv_qp *qp, struct ffv_rwqe *w)
{
	ffv_complete(qp, 0, w->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0);
	free(w);
}

int ffv_qp_retry_dead(struct ffv_qp *qp)
{
	int64_t now = ffv_now_ns();
	int started = !qp->reach_by;

	if (started)
		qp->reach_by = now + retry_budget_ns(qp);
	if (now >= qp->reach_by) {
		qp->reach_by = 0;
		return IBV_WC_RETRY_EXC_ERR;
	}
	retry_on_own(qp, started);
	return FFV_REACH_LATER;
}

void ffv_qp_error(struct ffv_qp *qp)
{
	struct ffv_rwqe *w;

	if (qp->vqp.qp.state == IBV_QPS_RTR || qp->vqp.qp.state == IBV_QPS_RTS)
		ffv_take_incoming(qp);
	qp->vqp.qp.state = IBV_QPS_ERR;
	qp->attr.qp_state = IBV_QPS_ERR;
	qp->reach_by = 0;	/* nothing is retried in ERR: no tick for it */
	qp->rnr_by = 0;
	ffv_wire_flush(qp);	/* written before the send queue's: flushed first */
	while (qp->sq) {
		struct ffv_swqe *w = qp->sq;

		qp->sq = w->next;
		ffv_complete(qp, 1, w->wr.wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND, 0);
		free(w);
	}
	qp->sq_tail = &qp->sq;
	qp->sq_count = 0;
	/* The receive it holds, then its own; an SRQ's stay in it, for its other QPs (IB spec). */
	w = qp->rx_wqe;
	qp->rx_wqe = NULL;
	if (w)
		flush_recv(qp, w);
	while (!qp->srq && (w = ffv_rq_pop(qp)))
		flush_recv(qp, w);
	/* It will take no more from its SRQ: "Last WQE Reached", as the IB spec asks. */
	if (qp->srq) {
		qp->events++;
		ffv_async_event(ffv_ctx(qp->vqp.qp.context), &qp->vqp.qp, IBV_EVENT_QP_LAST_WQE_REACHED);
	}
}

int ffv_destroy_qp(struct ibv_qp *ibqp)
{
	struct ffv_context *c = ffv_ctx(ibqp->context);
	struct ffv_qp *qp = ffv_qp(ibqp), **pp;
	uint8_t buf[256];
	struct ff_enc e;
	struct ff_msg m;
	int n, rn = 0, unread;

	ffv_lock(c);
	unread = qp->events ? ffv_async_forget(c, ibqp) : 0;
	if (unread < 0) {
		pthread_mutex_unlock(&c->mu);
		return -unread;
	}
	for (pp = &c->qps; *pp && *pp != qp; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = qp->next;
	__atomic_store_n((uint32_t *)(qp->mem + FF_VQP_OFF_DEAD), FF_VQP_DEAD_GONE, __ATOMIC_RELEASE);
	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_VERBS_QP_DESTROY, ffv_next_seq(c));
	ff_enc_u32(&e, FF_ATTR_QPN, ibqp->qp_num);
	n = ff_enc_finish(&e);
	if (n >= 0)
		ffv_agent_call(c, buf, n, NULL, 0, &m, sizeof(buf), NULL, &rn);
	pthread_mutex_unlock(&c->mu);
	/* As a kernel's destroy: the events the program read, acknowledged first. */
	ffv_async_wait_acked(&ibqp->mutex, &ibqp->cond, &ibqp->events_completed,
			     qp->events - (uint32_t)unread);
	free_qp(qp);
	return 0;
}
