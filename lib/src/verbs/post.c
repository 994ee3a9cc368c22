/* SPDX-License-Identifier: MIT */
/*
 * The same-host data path (docs/VERBS.md): the initiator carries out each
 * work request in ibv_post_send, on shared memory. SENDs (and the receive
 * side of WRITE with immediate) go as records into the peer QP's ring,
 * which the receiver matches to its posted receives when it polls; WRITE,
 * READ and atomics act on the target's region directly. Requests run in
 * order: one behind a SEND that did not fit the ring waits with it, and
 * both go on at the initiator's next post or poll.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "verbs/verbs.h"

static void push_wc(struct ffv_qp *qp, struct ffv_cq *cq, const struct ibv_wc *wc, int solicited)
{
	if (ffv_cq_push(cq, wc, solicited) && qp->vqp.qp.state != IBV_QPS_ERR)
		ffv_qp_error(qp);	/* a NIC moves the QPs of an overflowed CQ to error */
}

void ffv_complete(struct ffv_qp *qp, int send, uint64_t wr_id, enum ibv_wc_status st,
		  enum ibv_wc_opcode op, uint32_t len)
{
	struct ibv_wc wc = { .wr_id = wr_id, .status = st, .opcode = op, .byte_len = len,
			     .qp_num = qp->vqp.qp.qp_num, .src_qp = qp->peer_qpn };

	push_wc(qp, send ? qp->scq : qp->rcq, &wc, 0);
}

/*
 * Whether the peer takes no more of what we send: gone (dead word
 * FF_VQP_DEAD_GONE, or across hosts the link), or, only if any, taken back
 * to RESET (FF_VQP_DEAD_RESET: it reads a new ring now, as a NIC's QP in
 * RESET drops what comes), which a NIC that does not send never notices.
 */
static int peer_dead(const struct ffv_qp *qp, int any)
{
	uint32_t d;

	if (qp->wire)
		return ffv_wire_dead(qp);
	d = __atomic_load_n((uint32_t *)(qp->peer_mem + FF_VQP_OFF_DEAD), __ATOMIC_ACQUIRE);
	return any ? d != 0 : d == FF_VQP_DEAD_GONE;
}

/* Whether the peer's QP lets one-sided requests do access (its qp_access_flags). */
static int peer_allows(const struct ffv_qp *qp, int access)
{
	uint32_t a = __atomic_load_n((uint32_t *)(qp->peer_mem + FF_VQP_OFF_ACCESS), __ATOMIC_ACQUIRE);

	return (a & (uint32_t)access) == (uint32_t)access;
}

/* ---- the sender's side of a ring ---- */

long ffv_ring_fit(uint32_t size, uint64_t *prod, uint64_t cons, uint32_t len)
{
	uint32_t need = FF_VQP_REC_HDR + ffv_round16(len);
	uint32_t off = (uint32_t)(*prod & (size - 1)), to_end = size - off;
	uint64_t used = *prod - cons;
	uint32_t room = used > size ? 0 : (uint32_t)(size - used);	/* 0 also when cons makes no sense */

	if (need > to_end) {
		if (room < to_end + need)
			return -1;
		*prod += to_end;
		return 0;
	}
	return room < need ? -1 : (long)off;
}

/* ffv_ring_reserve against the consumer count cons. */
static long reserve(uint8_t *mem, uint32_t size, uint64_t *prod, uint64_t cons, uint32_t len)
{
	uint64_t at = *prod;
	long off = ffv_ring_fit(size, prod, cons, len);

	if (off >= 0 && *prod != at) {
		uint32_t pad[4] = { (uint32_t)(*prod - at) - FF_VQP_REC_HDR, FF_VQP_OP_PAD, 0, 0 };

		memcpy(mem + FF_VQP_HDR_SIZE + (at & (size - 1)), pad, sizeof(pad));
	}
	return off;
}

long ffv_ring_reserve(uint8_t *mem, uint32_t size, uint64_t *prod, uint32_t len)
{
	return reserve(mem, size, prod, __atomic_load_n((const uint64_t *)(mem + FF_VQP_OFF_CONS),
							__ATOMIC_ACQUIRE), len);
}

/*
 * Room in the peer's ring by the consumer count last read, read again only
 * when that leaves none: the peer writes it at each message it takes, and
 * reading it at each send would move its cache line here and back per
 * message (a miss on every reply's path).
 */
static long ring_reserve(struct ffv_qp *qp, uint32_t len)
{
	long off = reserve(qp->peer_mem, qp->peer_ring, &qp->tx_prod, qp->peer_cons, len);

	if (off >= 0)
		return off;
	qp->peer_cons = __atomic_load_n((const uint64_t *)(qp->peer_mem + FF_VQP_OFF_CONS), __ATOMIC_ACQUIRE);
	return reserve(qp->peer_mem, qp->peer_ring, &qp->tx_prod, qp->peer_cons, len);
}

void ffv_rec_header(uint8_t *at, uint32_t len, uint8_t op, uint8_t flags, uint32_t imm,
		    uint32_t total)
{
	uint8_t h[FF_VQP_REC_HDR] = { 0 };

	memcpy(h + FF_VQP_REC_LEN, &len, 4);
	h[FF_VQP_REC_OP] = op;
	h[FF_VQP_REC_FLAGS] = flags;
	memcpy(h + FF_VQP_REC_IMM, &imm, 4);
	memcpy(h + FF_VQP_REC_TOTAL, &total, 4);
	memcpy(at, h, sizeof(h));
}

void ffv_ring_publish(uint8_t *mem, uint64_t prod, int bell)
{
	__atomic_store_n((uint64_t *)(mem + FF_VQP_OFF_PROD), prod, __ATOMIC_RELEASE);
	if (bell < 0)
		return;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);	/* prod before armed: docs/VERBS.md, "No lost wake-up" */
	if (__atomic_load_n((uint32_t *)(mem + FF_VQP_OFF_ARMED), __ATOMIC_RELAXED))
		ffv_ring(bell);
}

static void publish(struct ffv_qp *qp)
{
	ffv_ring_publish(qp->peer_mem, qp->tx_prod, qp->peer_bell);
}

/* The flags of a message's last record: FF_VQP_SOLICITED if the sender asked. */
static uint8_t last_flags(const struct ibv_send_wr *wr)
{
	return FF_VQP_LAST | (wr->send_flags & IBV_SEND_SOLICITED ? FF_VQP_SOLICITED : 0);
}

/*
 * Copy len bytes between buf and the SGEs' bytes from offset off: into the
 * SGEs (scatter) when in, else out of them (gather).
 */
static void sge_copy(const struct ibv_sge *sge, int n, uint32_t off, uint8_t *buf, uint32_t len, int in)
{
	for (int i = 0; i < n && len; i++) {
		uint8_t *at = (uint8_t *)(uintptr_t)sge[i].addr;
		uint32_t l = sge[i].length;

		if (off >= l) {
			off -= l;
			continue;
		}
		l -= off;
		if (l > len)
			l = len;
		memcpy(in ? at + off : buf, in ? buf : at + off, l);
		buf += l, len -= l, off = 0;
	}
}

void ffv_gather(uint8_t *dst, const struct ibv_sge *sge, int n, uint32_t off, uint32_t len)
{
	sge_copy(sge, n, off, dst, len, 0);
}

void ffv_scatter(const struct ibv_sge *sge, int n, uint32_t off, const uint8_t *src, uint32_t len)
{
	sge_copy(sge, n, off, (uint8_t *)src, len, 1);
}

/* ---- one work request ---- */

/* IB's RNR timer codes (the receiver's min_rnr_timer), in µs: code 0 is the longest. */
static const uint32_t rnr_timer_us[32] = {
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560,
	3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840,
	245760, 327680, 491520,
};

/*
 * Before a message that takes a receive (SEND, WRITE with immediate): with
 * rnr_retry 7 (for ever, what nearly every program asks) it goes into the
 * ring at once and waits there for its receive. Below 7, as a NIC: it
 * starts only once the peer has a receive posted for it (the peer's
 * rq_posted word), retried rnr_retry times the peer's RNR timer, then the
 * request fails. FFV_DONE, FFV_WAIT, or -status.
 */
static int rnr_check(struct ffv_qp *qp)
{
	uint64_t posted;
	uint32_t code;

	/* Across hosts a message waits for its receive whatever rnr_retry (docs/VERBS.md, "Across hosts"). */
	if (qp->attr.rnr_retry >= 7 || qp->wire)
		return FFV_DONE;
	posted = __atomic_load_n((uint64_t *)(qp->peer_mem + FF_VQP_OFF_RQ_POSTED), __ATOMIC_ACQUIRE);
	if (posted > qp->tx_msgs) {
		qp->rnr_by = 0;
		return FFV_DONE;
	}
	if (!qp->rnr_by) {
		code = __atomic_load_n((uint32_t *)(qp->peer_mem + FF_VQP_OFF_RNR_TIMER), __ATOMIC_RELAXED) & 31;
		qp->rnr_by = ffv_now_ns() + (int64_t)qp->attr.rnr_retry * rnr_timer_us[code] * 1000 + 1;
	}
	if (ffv_now_ns() >= qp->rnr_by) {
		qp->rnr_by = 0;
		return -(int)IBV_WC_RNR_RETRY_EXC_ERR;
	}
	/* A NIC retries on its own: so does the event thread (events.c), if the program does not call. */
	ffv_events_start(ffv_ctx(qp->vqp.qp.context));
	return FFV_WAIT;
}

/* Move a SEND's bytes [done, total) into the ring while there is room. */
static int do_send(struct ffv_qp *qp, const struct ibv_send_wr *wr, uint32_t total, uint32_t *done)
{
	uint8_t op = wr->opcode == IBV_WR_SEND_WITH_IMM ? FF_VQP_OP_SEND_IMM : FF_VQP_OP_SEND;
	int r = *done == 0 ? rnr_check(qp) : FFV_DONE;

	if (r != FFV_DONE)
		return r;
	do {
		uint32_t len = total - *done;
		long off;

		if (len > FFV_PIECE_MAX(qp->peer_ring))
			len = FFV_PIECE_MAX(qp->peer_ring);
		if ((off = ring_reserve(qp, len)) < 0)
			break;
		if (*done == 0)
			qp->tx_msgs++;
		ffv_rec_header(qp->peer_mem + FF_VQP_HDR_SIZE + off, len, op,
			   (*done == 0 ? FF_VQP_FIRST : 0) | (*done + len == total ? last_flags(wr) : 0),
			   wr->imm_data, total);
		ffv_gather(qp->peer_mem + FF_VQP_HDR_SIZE + off + FF_VQP_REC_HDR, wr->sg_list, wr->num_sge,
		       *done, len);
		qp->tx_prod += FF_VQP_REC_HDR + ffv_round16(len);
		*done += len;
	} while (*done < total);
	publish(qp);
	return *done == total ? FFV_DONE : FFV_WAIT;
}

/* An RDMA WRITE: gather straight into the target's region; with immediate, a record follows. */
static int do_write(struct ffv_qp *qp, const struct ibv_send_wr *wr, uint32_t total, uint32_t *done)
{
	enum ibv_wc_status st;
	uint8_t *dst;
	int r;

	if (*done == 0 && wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM && (r = rnr_check(qp)) != FFV_DONE)
		return r;
	/* IB: a zero-length RDMA request touches no memory and its R_Key is not checked (UCX probes peers so). */
	if (*done == 0 && total) {
		if (!peer_allows(qp, IBV_ACCESS_REMOTE_WRITE))
			return -(int)IBV_WC_REM_ACCESS_ERR;
		dst = ffv_grant_find(qp, wr->wr.rdma.rkey, wr->wr.rdma.remote_addr, total,
				     IBV_ACCESS_REMOTE_WRITE, &st);
		if (!dst)
			return -(int)st;
		ffv_gather(dst, wr->sg_list, wr->num_sge, 0, total);
		*done = 1;	/* the data is there; only the record may wait */
	}
	if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
		long off = ring_reserve(qp, 0);

		if (off < 0)
			return FFV_WAIT;
		qp->tx_msgs++;
		/* Release order: the target sees the record only after the data. */
		ffv_rec_header(qp->peer_mem + FF_VQP_HDR_SIZE + off, 0, FF_VQP_OP_WRITE_IMM,
			   FF_VQP_FIRST | last_flags(wr), wr->imm_data, total);
		qp->tx_prod += FF_VQP_REC_HDR;
		publish(qp);
	}
	return FFV_DONE;
}


static int do_read(struct ffv_qp *qp, const struct ibv_send_wr *wr, uint32_t total)
{
	enum ibv_wc_status st;
	const uint8_t *src;

	if (!total)
		return FFV_DONE;	/* as a zero-length WRITE (do_write) */
	if (!peer_allows(qp, IBV_ACCESS_REMOTE_READ))
		return -(int)IBV_WC_REM_ACCESS_ERR;
	src = ffv_grant_find(qp, wr->wr.rdma.rkey, wr->wr.rdma.remote_addr, total, IBV_ACCESS_REMOTE_READ, &st);
	if (!src)
		return -(int)st;
	ffv_scatter(wr->sg_list, wr->num_sge, 0, src, total);
	return FFV_DONE;
}

static int do_atomic(struct ffv_qp *qp, const struct ibv_send_wr *wr, uint32_t total)
{
	uint64_t raddr = wr->wr.atomic.remote_addr, old;
	enum ibv_wc_status st;
	uint64_t *dst;

	if (total != 8 || raddr % 8)
		return -(int)IBV_WC_REM_INV_REQ_ERR;
	if (!peer_allows(qp, IBV_ACCESS_REMOTE_ATOMIC))
		return -(int)IBV_WC_REM_ACCESS_ERR;
	dst = (uint64_t *)ffv_grant_find(qp, wr->wr.atomic.rkey, raddr, 8, IBV_ACCESS_REMOTE_ATOMIC, &st);
	if (!dst)
		return -(int)st;
	if (wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		old = __atomic_fetch_add(dst, wr->wr.atomic.compare_add, __ATOMIC_SEQ_CST);
	} else {
		old = wr->wr.atomic.compare_add;
		__atomic_compare_exchange_n(dst, &old, wr->wr.atomic.swap, 0, __ATOMIC_SEQ_CST,
					    __ATOMIC_SEQ_CST);
	}
	ffv_scatter(wr->sg_list, wr->num_sge, 0, (const uint8_t *)&old, 8);
	return FFV_DONE;
}

static enum ibv_wc_opcode wc_opcode(enum ibv_wr_opcode op)
{
	switch (op) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
	case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
	case IBV_WR_ATOMIC_CMP_AND_SWP: return IBV_WC_COMP_SWAP;
	case IBV_WR_ATOMIC_FETCH_AND_ADD: return IBV_WC_FETCH_ADD;
	default: return IBV_WC_SEND;
	}
}

/* Carry out wr as far as it goes: FFV_DONE, FFV_WAIT, or -status. */
static int run(struct ffv_qp *qp, const struct ibv_send_wr *wr, uint32_t total, uint32_t *done)
{
	if (!ffv_reached(qp)) {
		int st = ffv_qp_reach(qp);

		if (st == FFV_REACH_LATER)
			return FFV_WAIT;
		if (st != IBV_WC_SUCCESS)
			return -st;
	}
	if (peer_dead(qp, 1)) {
		int st = ffv_qp_retry_dead(qp);

		return st == FFV_REACH_LATER ? FFV_WAIT : -st;
	}
	if (qp->wire)
		return ffv_wire_run(qp, wr, total, done);
	switch (wr->opcode) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
		return do_send(qp, wr, total, done);
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return do_write(qp, wr, total, done);
	case IBV_WR_RDMA_READ:
		return do_read(qp, wr, total);
	case IBV_WR_ATOMIC_CMP_AND_SWP:
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return do_atomic(qp, wr, total);
	default:
		return -(int)IBV_WC_REM_INV_REQ_ERR;
	}
}

static int signaled(const struct ffv_qp *qp, const struct ibv_send_wr *wr)
{
	return qp->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
}

void ffv_finish(struct ffv_qp *qp, const struct ibv_send_wr *wr, uint32_t total, int r)
{
	if (r < 0) {
		ffv_complete(qp, 1, wr->wr_id, (enum ibv_wc_status)-r, wc_opcode(wr->opcode), 0);
		ffv_qp_error(qp);
	} else if (signaled(qp, wr)) {
		ffv_complete(qp, 1, wr->wr_id, IBV_WC_SUCCESS, wc_opcode(wr->opcode),
			     wr->opcode == IBV_WR_RDMA_READ || wr->opcode == IBV_WR_SEND ||
			     wr->opcode == IBV_WR_SEND_WITH_IMM ? total : 0);
	}
}

/* Go on with the requests that wait, oldest first. */
static void drain_sq(struct ffv_qp *qp)
{
	while (qp->sq && qp->vqp.qp.state == IBV_QPS_RTS) {
		struct ffv_swqe *w = qp->sq;
		int r = run(qp, &w->wr, w->total, &w->done);

		if (r == FFV_WAIT)
			return;
		qp->sq = w->next;
		if (!qp->sq)
			qp->sq_tail = &qp->sq;
		if (r == FFV_SENT) {
			ffv_wire_sent(qp, w);	/* still counted among the send queue's */
			continue;
		}
		qp->sq_count--;
		ffv_finish(qp, &w->wr, w->total, r);
		free(w);
	}
}

/*
 * After drain_sq: while sends wait for room, the peer's waiting word asks
 * it to ring our doorbell when it consumes, then the room is looked at
 * again, the mirror of ffv_req_notify_cq's arm-then-look (docs/VERBS.md,
 * "No lost wake-up"). Only while the event thread is to move the sends
 * along: for a program with a channel, or one that does not poll (a NIC
 * goes on without its program); a program that polls moves them itself,
 * and a ring per consumption beside it would cost a wake each.
 */
static void want_room(struct ffv_qp *qp)
{
	if (!qp->peer_mem)
		return;
	while ((qp->sq != NULL && (qp->belled || !qp->busy)) != qp->waiting) {
		qp->waiting = qp->sq != NULL && (qp->belled || !qp->busy);
		__atomic_store_n((uint32_t *)(qp->peer_mem + FF_VQP_OFF_WAITING), qp->waiting,
				 __ATOMIC_SEQ_CST);
		if (qp->waiting) {
			__atomic_thread_fence(__ATOMIC_SEQ_CST);
			drain_sq(qp);
		}
	}
}

/*
 * A copy of wr (and its inline data) that outlives the call, its first
 * done bytes gone, counted in the send queue; NULL when it is full or
 * memory is.
 */
static struct ffv_swqe *keep(struct ffv_qp *qp, const struct ibv_send_wr *wr, uint32_t total,
			     uint32_t done)
{
	int inl = (wr->send_flags & IBV_SEND_INLINE) != 0;
	struct ffv_swqe *w;

	if (qp->sq_count >= qp->cap.max_send_wr)
		return NULL;
	w = malloc(sizeof(*w) + sizeof(struct ibv_sge) * (inl ? 1 : wr->num_sge) + (inl ? total : 0));
	if (!w)
		return NULL;
	w->wr = *wr;
	w->wr.next = NULL;
	w->wr.sg_list = w->sge;
	w->total = total;
	w->done = done;
	if (inl) {
		uint8_t *data = (uint8_t *)(w->sge + 1);

		ffv_gather(data, wr->sg_list, wr->num_sge, 0, total);
		w->sge[0] = (struct ibv_sge){ .addr = (uintptr_t)data, .length = total };
		w->wr.num_sge = 1;
	} else if (wr->num_sge) {	/* no SGE: sg_list may be NULL */
		memcpy(w->sge, wr->sg_list, sizeof(struct ibv_sge) * wr->num_sge);
	}
	w->next = NULL;
	qp->sq_count++;
	return w;
}

/*
 * The local buffers of wr: each SGE inside an MR of this context (unless
 * inline) that allows what the request does with it. Their total bytes in
 * *total, or -status.
 */
static int check_local(struct ffv_context *c, const struct ibv_send_wr *wr, uint32_t *total)
{
	int need = wr->opcode == IBV_WR_RDMA_READ || wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
		   wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ? IBV_ACCESS_LOCAL_WRITE : 0;
	uint64_t sum = 0;

	for (int i = 0; i < wr->num_sge; i++) {
		const struct ibv_sge *s = &wr->sg_list[i];

		if (!(wr->send_flags & IBV_SEND_INLINE) &&
		    !ffv_mr_find(c, s->lkey, s->addr, s->length, need))
			return -(int)IBV_WC_LOC_PROT_ERR;
		sum += s->length;
	}
	if (sum > (1u << 31))
		return -(int)IBV_WC_LOC_LEN_ERR;
	*total = (uint32_t)sum;
	return 0;
}

int ffv_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct ffv_context *c = ffv_ctx(ibqp->context);
	struct ffv_qp *qp = ffv_qp(ibqp);
	int err = 0;

	ffv_lock(c);
	qp->calls++;
	drain_sq(qp);
	for (; wr; wr = wr->next) {
		uint32_t total = 0, done = 0;
		int r;

		if (ibqp->state == IBV_QPS_ERR) {
			/* Posted to a QP in error: flushed, as a NIC does. */
			ffv_complete(qp, 1, wr->wr_id, IBV_WC_WR_FLUSH_ERR, wc_opcode(wr->opcode), 0);
			continue;
		}
		if (ibqp->state != IBV_QPS_RTS || wr->num_sge < 0 ||
		    (uint32_t)wr->num_sge > qp->cap.max_send_sge) {
			err = EINVAL;
			break;
		}
		r = check_local(c, wr, &total);
		if (r < 0) {
			ffv_finish(qp, wr, 0, r);
			continue;
		}
		if ((wr->send_flags & IBV_SEND_INLINE) && total > qp->cap.max_inline_data) {
			err = EINVAL;
			break;
		}
		if (ibqp->qp_type == IBV_QPT_UD) {
			if (wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM) {
				err = EINVAL;	/* a UD QP only sends */
				break;
			}
			ffv_finish(qp, wr, total, ffv_ud_send(qp, wr, total));
			continue;
		}
		if (qp->wire && qp->sq_count >= qp->cap.max_send_wr) {
			err = ENOMEM;	/* a frame, once begun, must be kept to go on */
			break;
		}
		r = qp->sq ? FFV_WAIT : run(qp, wr, total, &done);
		if (r == FFV_WAIT || r == FFV_SENT) {
			struct ffv_swqe *w = keep(qp, wr, total, done);

			if (!w && r == FFV_WAIT && !done) {
				err = ENOMEM;
				break;
			}
			if (!w) {	/* out of memory with its bytes gone: the QP cannot go on */
				ffv_finish(qp, wr, total, -(int)IBV_WC_LOC_QP_OP_ERR);
			} else if (r == FFV_SENT) {
				ffv_wire_sent(qp, w);
			} else {
				*qp->sq_tail = w;
				qp->sq_tail = &w->next;
			}
			continue;
		}
		ffv_finish(qp, wr, total, r);
	}
	want_room(qp);
	pthread_mutex_unlock(&c->mu);
	if (err)
		*bad = wr;
	return err;
}

/* ---- the receiver's side ---- */

int ffv_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct ffv_context *c = ffv_ctx(ibqp->context);
	struct ffv_qp *qp = ffv_qp(ibqp);
	int err = 0;

	ffv_lock(c);
	if (qp->srq || ibqp->state == IBV_QPS_RESET) {
		/* A QP with an SRQ has no receive queue of its own. */
		*bad = wr;
		err = EINVAL;
	} else if (ibqp->state == IBV_QPS_ERR) {
		for (; wr; wr = wr->next)	/* flushed, as a NIC does */
			ffv_complete(qp, 0, wr->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0);
	} else {
		uint32_t before = qp->rq.count;

		err = ffv_rq_post(&qp->rq, wr, bad);
		/* What a peer below rnr_retry 7 waits for (rnr_check). */
		qp->rq_posted += qp->rq.count - before;
		__atomic_store_n((uint64_t *)(qp->mem + FF_VQP_OFF_RQ_POSTED), qp->rq_posted, __ATOMIC_RELEASE);
		ffv_rq_fed(qp);
	}
	pthread_mutex_unlock(&c->mu);
	return err;
}

/* The receive qp holds is done: its completion, and the QP's error if it failed. */
static void recv_done(struct ffv_qp *qp, uint8_t op, uint8_t flags, uint32_t imm, uint32_t total)
{
	struct ffv_rwqe *w = qp->rx_wqe;
	struct ibv_wc wc = { .wr_id = w->wr_id, .status = qp->rx_status,
			     .opcode = op == FF_VQP_OP_WRITE_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV,
			     .byte_len = total, .qp_num = qp->vqp.qp.qp_num, .src_qp = qp->peer_qpn };

	if (op != FF_VQP_OP_SEND) {
		wc.imm_data = imm;
		wc.wc_flags = IBV_WC_WITH_IMM;
	}
	qp->rx_wqe = NULL;
	free(w);
	push_wc(qp, qp->rcq, &wc, (flags & FF_VQP_SOLICITED) != 0);
	if (wc.status != IBV_WC_SUCCESS && qp->vqp.qp.state != IBV_QPS_ERR)
		ffv_qp_error(qp);
}

/*
 * A message's first record: the receive it goes into, held by qp until its
 * last (from its SRQ, messages of several QPs interleave); 0, or -1 when
 * none is posted.
 */
static int recv_start(struct ffv_qp *qp, uint8_t op, uint32_t total)
{
	struct ffv_rwqe *w = ffv_rx_next(qp);

	if (!w)
		return -1;
	qp->rx_wqe = w;
	qp->rx_op = op;
	qp->rx_off = 0;
	/* WRITE with immediate takes a receive but never touches its buffers. */
	qp->rx_status = op == FF_VQP_OP_WRITE_IMM ? IBV_WC_SUCCESS :
			!ffv_rwqe_writable(ffv_ctx(qp->vqp.qp.context), w) ? IBV_WC_LOC_PROT_ERR :
			total > w->room ? IBV_WC_LOC_LEN_ERR : IBV_WC_SUCCESS;
	return 0;
}

/*
 * Take the records waiting in our ring into the posted receives. A record
 * that makes no sense (the peer broke the layout) puts the QP in error.
 */
static void take_ring(struct ffv_qp *qp)
{
	uint8_t *ring = qp->mem + FF_VQP_HDR_SIZE;
	uint64_t prod = __atomic_load_n((uint64_t *)(qp->mem + FF_VQP_OFF_PROD), __ATOMIC_ACQUIRE);
	uint64_t start = qp->rx_cons;

	if (qp->vqp.qp.qp_type == IBV_QPT_UD) {
		ffv_ud_take(qp);
		return;
	}
	if (qp->taking || qp->rx_broken)
		return;	/* a completion inside made the QP fail: its flush comes here */
	qp->taking = 1;
	qp->rx_starved = 0;
	while (qp->rx_cons != prod && qp->vqp.qp.state != IBV_QPS_ERR) {
		uint64_t avail = prod - qp->rx_cons;
		uint32_t off = (uint32_t)(qp->rx_cons & (qp->ring_size - 1)), len, imm, total, rec;
		uint8_t op, flags;

		memcpy(&len, ring + off + FF_VQP_REC_LEN, 4);
		op = ring[off + FF_VQP_REC_OP];
		flags = ring[off + FF_VQP_REC_FLAGS];
		memcpy(&imm, ring + off + FF_VQP_REC_IMM, 4);
		memcpy(&total, ring + off + FF_VQP_REC_TOTAL, 4);
		rec = FF_VQP_REC_HDR + ffv_round16(len);
		if (avail > qp->ring_size || len > qp->ring_size || rec > avail ||
		    off + rec > qp->ring_size || (op == FF_VQP_OP_WRITE_IMM && len) ||
		    (op != FF_VQP_OP_PAD && op != FF_VQP_OP_SEND && op != FF_VQP_OP_SEND_IMM &&
		     op != FF_VQP_OP_WRITE_IMM) ||
		    (op != FF_VQP_OP_PAD && (flags & FF_VQP_FIRST ? 1 : 0) == (qp->rx_wqe != NULL)) ||
		    (op == FF_VQP_OP_WRITE_IMM && (flags & (FF_VQP_FIRST | FF_VQP_LAST)) !=
						    (FF_VQP_FIRST | FF_VQP_LAST)) ||
		    (op != FF_VQP_OP_PAD && !(flags & FF_VQP_FIRST) && op != qp->rx_op)) {
			qp->rx_broken = 1;
			break;
		}
		if (op != FF_VQP_OP_PAD) {
			if (flags & FF_VQP_FIRST && recv_start(qp, op, total))
				break;	/* no receive posted: it waits (RNR, retried for ever) */
			if (qp->rx_status == IBV_WC_SUCCESS && len) {
				if (qp->rx_off + len > qp->rx_wqe->room)
					qp->rx_status = IBV_WC_LOC_LEN_ERR;
				else
					ffv_scatter(qp->rx_wqe->sge, qp->rx_wqe->num_sge, qp->rx_off,
						    ring + off + FF_VQP_REC_HDR, len);
			}
			qp->rx_off += len;
			if (flags & FF_VQP_LAST)
				recv_done(qp, op, flags, imm, op == FF_VQP_OP_WRITE_IMM ? total : qp->rx_off);
		}
		qp->rx_cons += rec;
	}
	if (qp->rx_cons != start) {
		__atomic_store_n((uint64_t *)(qp->mem + FF_VQP_OFF_CONS), qp->rx_cons, __ATOMIC_RELEASE);
		/* Room made: the producer's doorbell if its waiting word asks (want_room). */
		if (qp->peer_bell >= 0) {
			__atomic_thread_fence(__ATOMIC_SEQ_CST);
			if (__atomic_load_n((uint32_t *)(qp->mem + FF_VQP_OFF_WAITING), __ATOMIC_RELAXED))
				ffv_ring(qp->peer_bell);
		}
	}
	qp->taking = 0;
	if (qp->rx_broken && qp->vqp.qp.state != IBV_QPS_ERR)
		ffv_qp_error(qp);
}

void ffv_take_incoming(struct ffv_qp *qp)
{
	if (!qp->wire) {
		take_ring(qp);
		return;
	}
	/* A peer across hosts: its frames into our ring, then taken, then the room it made told. */
	ffv_wire_rx(qp);
	take_ring(qp);
	ffv_wire_tx(qp);
}

void ffv_wire_serve(struct ffv_qp *qp)
{
	if (qp->vqp.qp.state == IBV_QPS_RESET || qp->vqp.qp.state == IBV_QPS_INIT)
		return;
	ffv_wire_rx(qp);
	if (qp->vqp.qp.state == IBV_QPS_RTS)
		drain_sq(qp);
	ffv_wire_tx(qp);
}

void ffv_progress(struct ffv_qp *qp)
{
	if (qp->vqp.qp.state == IBV_QPS_RESET || qp->vqp.qp.state == IBV_QPS_INIT)
		return;
	if (qp->vqp.qp.qp_type == IBV_QPT_UD) {
		ffv_ud_take(qp);
		return;
	}
	/*
	 * A QP that only receives maps its peer too, once the peer connected
	 * back, to see it die (below); a failure here is no error (a NIC
	 * never notices a silent peer it does not send to).
	 */
	if (!ffv_reached(qp) && qp->vqp.qp.state != IBV_QPS_ERR && !qp->sq &&
	    ffv_now_ns() >= qp->reach_next) {
		ffv_qp_connect(qp);
		qp->reach_next = ffv_reached(qp) ? 0 : ffv_now_ns() + 1000000;
	}
	ffv_take_incoming(qp);
	if (qp->vqp.qp.state == IBV_QPS_RTS) {
		drain_sq(qp);
		want_room(qp);
	}
	ffv_wire_tx(qp);
	/*
	 * A peer gone with receives still posted: they will never fill. Flushed
	 * as late as a NIC would notice: once the program has polled every
	 * completion made before (ibv_rc_pingpong's server, woken by an event
	 * after its client exited, must not find the flush beside its last
	 * one) and the QP's retry budget is spent (a peer that exited half way
	 * through a SEND must not fail the messages its other QPs still hold
	 * for the same CQ: ibv_srq_pingpong). Not while sends wait: their
	 * retries end it.
	 */
	if (ffv_reached(qp) && qp->vqp.qp.state != IBV_QPS_ERR && !qp->sq && peer_dead(qp, 0) &&
	    __atomic_load_n((uint64_t *)(qp->mem + FF_VQP_OFF_PROD), __ATOMIC_ACQUIRE) == qp->rx_cons) {
		if (qp->rcq->count || qp->scq->count)
			qp->reach_by = 0;	/* the budget starts once they are polled: no ticks meanwhile */
		else if (ffv_qp_retry_dead(qp) != FFV_REACH_LATER)
			ffv_qp_error(qp);
	}
}

#define SPIN_SPAN_NS	100000
#define SPIN_EVERY_NS	2000

int ffv_qp_look(struct ffv_qp *qp)
{
	uint32_t spins = qp->rcq->spins + (qp->scq != qp->rcq ? qp->scq->spins : 0);
	int64_t now = ffv_now_ns(), span = now - qp->spins_at;
	int rc = qp->vqp.qp.qp_type == IBV_QPT_RC;
	int busy = rc && qp->sq && qp->calls != qp->calls_seen;
	int spinning = qp->spinning;

	qp->calls_seen = qp->calls;
	/* The rate over at least SPIN_SPAN_NS: an empty poll per SPIN_EVERY_NS or more is a spin. */
	if (span >= SPIN_SPAN_NS) {
		spinning = rc && qp->wire && (int64_t)(spins - qp->spins_seen) * SPIN_EVERY_NS >= span;
		qp->spins_seen = spins;
		qp->spins_at = now;
	}
	if (busy != qp->busy) {
		qp->busy = busy;
		want_room(qp);	/* stopped: the peer rings us when it makes room */
	}
	if (spinning != qp->spinning) {
		qp->spinning = spinning;
		ffv_wire_watch(qp);
	}
	return busy || spinning;
}
