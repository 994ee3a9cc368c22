/* SPDX-License-Identifier: MIT */
/*
 * Completion queues: private to the process (the peers never write them:
 * a receive completes when its owner polls, or its event thread wakes, and
 * takes the records waiting in its QPs' rings, post.c). Polling moves every
 * QP of the CQ along first, so a program that only polls still sees its
 * sends go out and its receives come in. Channels and arming: events.c.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "verbs/verbs.h"

struct ibv_cq *ffv_create_cq(struct ibv_context *ctx, int cqe, struct ibv_comp_channel *ch,
			     int vec)
{
	struct ffv_cq *cq;
	int err;

	if (cqe < 1 || cqe > (1 << 20) || vec < 0 || vec >= ctx->num_comp_vectors) {
		errno = EINVAL;
		return NULL;
	}
	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return NULL;
	cq->ctx = ffv_ctx(ctx);
	cq->chan = -1;
	cq->quiet_gen = UINT64_MAX;	/* no snapshot before its first poll */
	cq->size = (uint32_t)cqe;
	cq->wc = calloc(cq->size, sizeof(*cq->wc));
	err = !cq->wc ? -ENOMEM : ch ? ffv_cq_channel(cq->ctx, cq, ch) : 0;
	if (err) {
		free(cq->wc);
		free(cq);
		errno = -err;
		return NULL;
	}
	cq->vcq.cq.cqe = cqe;
	return &cq->vcq.cq;
}

/* As a NIC: fails while the CQ holds more completions than the new size. */
int ffv_resize_cq(struct ibv_cq *ibcq, int cqe)
{
	struct ffv_context *c = ffv_ctx(ibcq->context);
	struct ffv_cq *cq = ffv_cq(ibcq);
	struct ibv_wc *wc;

	if (cqe < 1 || cqe > (1 << 20))
		return EINVAL;
	wc = calloc((size_t)cqe, sizeof(*wc));
	if (!wc)
		return ENOMEM;
	ffv_lock(c);
	if ((uint32_t)cqe < cq->count) {
		pthread_mutex_unlock(&c->mu);
		free(wc);
		return EINVAL;
	}
	for (uint32_t i = 0; i < cq->count; i++)
		wc[i] = cq->wc[(cq->head + i) % cq->size];
	free(cq->wc);
	cq->wc = wc;
	cq->head = 0;
	cq->size = (uint32_t)cqe;
	ibcq->cqe = cqe;
	pthread_mutex_unlock(&c->mu);
	return 0;
}

int ffv_destroy_cq(struct ibv_cq *ibcq)
{
	struct ffv_context *c = ffv_ctx(ibcq->context);
	struct ffv_cq *cq = ffv_cq(ibcq);
	int unread;

	ffv_lock(c);
	for (struct ffv_qp *qp = c->qps; qp; qp = qp->next)
		if (qp->scq == cq || qp->rcq == cq) {
			pthread_mutex_unlock(&c->mu);
			return EBUSY;	/* as a NIC: a QP still uses it */
		}
	unread = cq->events ? ffv_async_forget(c, ibcq) : 0;
	pthread_mutex_unlock(&c->mu);
	if (unread < 0)
		return -unread;
	/* As a kernel's destroy: the events the program read, acknowledged first. */
	ffv_async_wait_acked(&ibcq->mutex, &ibcq->cond, &ibcq->async_events_completed,
			     cq->events - (uint32_t)unread);
	if (cq->chan >= 0)
		close(cq->chan);
	free(cq->quiet);
	free(cq->wc);
	free(cq);
	return 0;
}

int ffv_cq_push(struct ffv_cq *cq, const struct ibv_wc *wc, int solicited)
{
	if (cq->count == cq->size) {
		if (!cq->overflowed) {	/* a NIC's CQ goes to error, and says so once */
			cq->events++;
			ffv_async_event(cq->ctx, &cq->vcq.cq, IBV_EVENT_CQ_ERR);
		}
		cq->overflowed = 1;
		return -ENOSPC;
	}
	cq->wc[(cq->head + cq->count) % cq->size] = *wc;
	cq->count++;
	/* As the IB spec: solicited-only fires on a solicited receive or an error. */
	if (cq->armed == FFV_ARM_ANY ||
	    (cq->armed == FFV_ARM_SOLICITED && (solicited || wc->status != IBV_WC_SUCCESS)))
		ffv_cq_fire(cq);
	return 0;
}

/*
 * A QP with nothing to do at a poll but look at its ring: connected on
 * this host to a live peer, nothing in its send queue, nothing asked of
 * its peer; q->prod NULL: nothing to do at all. (A peer that dies later:
 * the agent rings our doorbell once its dead word is set, and the event
 * thread's scan, under ffv_lock, stales the snapshot.)
 */
static int quiet_qp(const struct ffv_qp *qp, struct ffv_quiet *q)
{
	enum ibv_qp_state st = qp->vqp.qp.state;

	q->prod = NULL;
	if (st == IBV_QPS_RESET || st == IBV_QPS_INIT || st == IBV_QPS_ERR)
		return 1;
	if (qp->vqp.qp.qp_type != IBV_QPT_RC || !qp->peer_mem || qp->sq || qp->waiting ||
	    qp->rx_broken || (st != IBV_QPS_RTR && st != IBV_QPS_RTS))
		return 0;
	*q = (struct ffv_quiet){ .prod = (const uint64_t *)(qp->mem + FF_VQP_OFF_PROD), .cons = qp->rx_cons };
	return !__atomic_load_n((const uint32_t *)(qp->peer_mem + FF_VQP_OFF_DEAD), __ATOMIC_ACQUIRE);
}

/* After a poll: cq's quiet snapshot, if each of its QPs is quiet (else none). */
static void note_quiet(struct ffv_context *c, struct ffv_cq *cq)
{
	uint32_t n = 0;

	cq->quiet_gen = c->gen - 1;
	for (struct ffv_qp *qp = c->qps; qp; qp = qp->next) {
		struct ffv_quiet q;

		if (qp->scq != cq && qp->rcq != cq)
			continue;
		if (!quiet_qp(qp, &q))
			return;
		if (!q.prod)
			continue;
		if (n == cq->quiet_cap) {
			struct ffv_quiet *more = realloc(cq->quiet, (n + 4) * sizeof(*more));

			if (!more)
				return;
			cq->quiet = more;
			cq->quiet_cap = n + 4;
		}
		cq->quiet[n++] = q;
	}
	cq->nquiet = n;
	cq->quiet_gen = c->gen;
}

/*
 * Whether a poll would find nothing, by cq's quiet snapshot: nothing
 * changed since but what its QPs' peers write (their prod), and that did
 * not change either. A polling program's empty polls
 * then cost a look at each ring, not a pass over every QP.
 */
static int still_quiet(const struct ffv_context *c, const struct ffv_cq *cq)
{
	if (cq->quiet_gen != c->gen || cq->count || cq->overflowed)
		return 0;
	for (uint32_t i = 0; i < cq->nquiet; i++)
		if (__atomic_load_n(cq->quiet[i].prod, __ATOMIC_ACQUIRE) != cq->quiet[i].cons)
			return 0;
	return 1;
}

int ffv_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
	struct ffv_context *c = ffv_ctx(ibcq->context);
	struct ffv_cq *cq = ffv_cq(ibcq);
	int got = 0;

	if (n < 0)
		return -EINVAL;
	pthread_mutex_lock(&c->mu);
	if (still_quiet(c, cq)) {
		cq->spins++;
		pthread_mutex_unlock(&c->mu);
		return 0;
	}
	for (struct ffv_qp *qp = c->qps; qp; qp = qp->next)
		if (qp->scq == cq || qp->rcq == cq) {
			qp->calls++;
			ffv_progress(qp);
		}
	if (cq->overflowed) {
		pthread_mutex_unlock(&c->mu);
		return -EOVERFLOW;	/* as a NIC's CQ in error: completions were lost */
	}
	if (!cq->count)
		cq->spins++;
	while (got < n && cq->count) {
		wc[got++] = cq->wc[cq->head];
		cq->head = (cq->head + 1) % cq->size;
		cq->count--;
	}
	note_quiet(c, cq);
	pthread_mutex_unlock(&c->mu);
	return got;
}
