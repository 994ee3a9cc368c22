/* SPDX-License-Identifier: MIT */
/*
 * Receive queues: a QP's own (its RQ) and shared ones (SRQs), which RC QPs
 * made with one take their receives from (docs/VERBS.md, "Shared receive
 * queues"). A message takes its receive from the queue when its first
 * record is matched and the QP holds it until its last (post.c), so the
 * messages of several QPs interleave in one SRQ. An SRQ's receives belong
 * to it: a QP that fails flushes only the receive it holds (IB spec; mlx5).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "verbs/verbs.h"

int ffv_rq_init(struct ffv_rq *q, uint32_t size, uint32_t max_sge)
{
	q->w = calloc(size, sizeof(*q->w));
	if (!q->w)
		return -ENOMEM;
	q->head = q->count = 0;
	q->size = size;
	q->max_sge = max_sge;
	return 0;
}

static struct ffv_rwqe *rq_take(struct ffv_rq *q)
{
	struct ffv_rwqe *w;

	if (!q->count)
		return NULL;
	w = q->w[q->head];
	q->head = (q->head + 1) % q->size;
	q->count--;
	return w;
}

void ffv_rq_clear(struct ffv_rq *q)
{
	for (struct ffv_rwqe *w; (w = rq_take(q));)
		free(w);
	q->head = 0;
}

void ffv_rq_free(struct ffv_rq *q)
{
	if (q->w)
		ffv_rq_clear(q);
	free(q->w);
	q->w = NULL;
}

int ffv_rq_post(struct ffv_rq *q, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	for (; wr; wr = wr->next) {
		struct ffv_rwqe *w;

		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->max_sge) {
			*bad = wr;
			return EINVAL;
		}
		w = q->count < q->size ? malloc(sizeof(*w) + sizeof(struct ibv_sge) * wr->num_sge) : NULL;
		if (!w) {
			*bad = wr;
			return ENOMEM;
		}
		w->wr_id = wr->wr_id;
		w->num_sge = wr->num_sge;
		w->room = 0;
		/* The buffers are checked when a message starts into them (ffv_rwqe_writable). */
		for (int i = 0; i < wr->num_sge; i++) {
			w->sge[i] = wr->sg_list[i];
			w->room += wr->sg_list[i].length;
		}
		q->w[(q->head + q->count) % q->size] = w;
		q->count++;
	}
	return 0;
}

/* A new ring of size entries, the receives kept in order; size >= count. */
static int rq_resize(struct ffv_rq *q, uint32_t size)
{
	struct ffv_rwqe **w = calloc(size, sizeof(*w));

	if (!w)
		return -ENOMEM;
	for (uint32_t i = 0; i < q->count; i++)
		w[i] = q->w[(q->head + i) % q->size];
	free(q->w);
	q->w = w;
	q->head = 0;
	q->size = size;
	return 0;
}

struct ffv_rwqe *ffv_rq_pop(struct ffv_qp *qp)
{
	struct ffv_srq *srq = qp->srq;
	struct ffv_rwqe *w;

	if (!srq)
		return rq_take(&qp->rq);
	w = rq_take(&srq->rq);
	/* As the IB spec: below the armed limit, one event, and the limit is disarmed. */
	if (w && srq->limit && srq->rq.count < srq->limit) {
		srq->limit = 0;
		srq->events++;
		ffv_async_event(srq->ctx, &srq->ibv_srq, IBV_EVENT_SRQ_LIMIT_REACHED);
	}
	return w;
}

struct ffv_rwqe *ffv_rx_next(struct ffv_qp *qp)
{
	struct ffv_rwqe *w = ffv_rq_pop(qp);

	if (!w) {
		qp->rx_starved = 1;	/* ffv_rq_fed goes on when one is posted */
		if (qp->srq)
			qp->srq->starved = 1;
	}
	return w;
}

void ffv_rq_fed(struct ffv_qp *qp)
{
	if (qp->rx_starved &&
	    (qp->vqp.qp.state == IBV_QPS_RTR || qp->vqp.qp.state == IBV_QPS_RTS))
		ffv_take_incoming(qp);
}

int ffv_rwqe_writable(struct ffv_context *c, const struct ffv_rwqe *w)
{
	for (int i = 0; i < w->num_sge; i++)
		if (!ffv_mr_find(c, w->sge[i].lkey, w->sge[i].addr, w->sge[i].length,
				 IBV_ACCESS_LOCAL_WRITE))
			return 0;
	return 1;
}

struct ibv_srq *ffv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	struct ffv_context *c = ffv_ctx(pd->context);
	struct ibv_srq_attr *a = &attr->attr;
	struct ffv_srq *srq;
	int err;

	if (a->max_wr < 1 || a->max_wr > FFV_MAX_SRQ_WR || a->max_sge > FFV_MAX_SGE) {
		errno = EINVAL;
		return NULL;
	}
	srq = calloc(1, sizeof(*srq));
	if (!srq)
		return NULL;
	a->max_sge = a->max_sge ? a->max_sge : 1;
	err = ffv_rq_init(&srq->rq, a->max_wr, a->max_sge);
	ffv_lock(c);
	if (!err && c->nsrq == FFV_MAX_SRQ)
		err = -ENOMEM;	/* the device's max_srq */
	if (!err)
		c->nsrq++;
	pthread_mutex_unlock(&c->mu);
	if (err) {
		ffv_rq_free(&srq->rq);
		free(srq);
		errno = -err;
		return NULL;
	}
	srq->ctx = c;
	/* The limit is armed only by modify_srq (IB spec: srq_limit is ignored here). */
	return &srq->ibv_srq;
}

int ffv_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr, int mask)
{
	struct ffv_srq *srq = ffv_srq(ibsrq);
	struct ffv_context *c = srq->ctx;
	uint32_t size;
	int err = 0;

	if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT))
		return EINVAL;
	ffv_lock(c);
	size = mask & IBV_SRQ_MAX_WR ? attr->max_wr : srq->rq.size;
	/* Resizing never drops a posted receive; the limit must fit the queue. */
	if (size < 1 || size > FFV_MAX_SRQ_WR || size < srq->rq.count ||
	    (mask & IBV_SRQ_LIMIT && attr->srq_limit > size))
		err = EINVAL;
	else if (size != srq->rq.size)
		err = -rq_resize(&srq->rq, size);
	if (!err && mask & IBV_SRQ_LIMIT)
		srq->limit = attr->srq_limit;	/* 0 disarms */
	pthread_mutex_unlock(&c->mu);
	return err;
}

int ffv_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
	struct ffv_srq *srq = ffv_srq(ibsrq);

	ffv_lock(srq->ctx);
	attr->max_wr = srq->rq.size;
	attr->max_sge = srq->rq.max_sge;
	attr->srq_limit = srq->limit;
	pthread_mutex_unlock(&srq->ctx->mu);
	return 0;
}

int ffv_destroy_srq(struct ibv_srq *ibsrq)
{
	struct ffv_srq *srq = ffv_srq(ibsrq);
	struct ffv_context *c = srq->ctx;
	int unread = 0;

	ffv_lock(c);
	for (struct ffv_qp *qp = c->qps; qp; qp = qp->next)
		if (qp->srq == srq) {
			pthread_mutex_unlock(&c->mu);
			return EBUSY;	/* as a NIC: a QP still uses it */
		}
	if (srq->events)
		unread = ffv_async_forget(c, ibsrq);
	if (unread >= 0)
		c->nsrq--;
	pthread_mutex_unlock(&c->mu);
	if (unread < 0)
		return -unread;
	ffv_async_wait_acked(&ibsrq->mutex, &ibsrq->cond, &ibsrq->events_completed,
			     srq->events - (uint32_t)unread);
	ffv_rq_free(&srq->rq);
	free(srq);
	return 0;
}

int ffv_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct ffv_srq *srq = ffv_srq(ibsrq);
	struct ffv_context *c = srq->ctx;
	int err;

	ffv_lock(c);
	err = ffv_rq_post(&srq->rq, wr, bad);
	/* A message that waited for a receive goes on now, as a NIC's RNR retry would. */
	if (srq->starved) {
		srq->starved = 0;
		for (struct ffv_qp *qp = c->qps; qp; qp = qp->next)
			if (qp->srq == srq)
				ffv_rq_fed(qp);
	}
	pthread_mutex_unlock(&c->mu);
	return err;
}
