/* SPDX-License-Identifier: MIT */
/*
 * Completion queues: private to the process (the peers never write them:
 * a receive completes when its owner polls, or its event thread wakes, and
 * takes the records waiting in its QPs' rings, post.c). Polling moves every
 * QP of the CQ along first, so a program that only polls still sees its
 * sends go out and its receives come in. Channels and arming: events.c.
 */
#include <errno.h>
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
	pthread_mutex_lock(&c->mu);
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

	pthread_mutex_lock(&c->mu);
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

int ffv_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
	struct ffv_context *c = ffv_ctx(ibcq->context);
	struct ffv_cq *cq = ffv_cq(ibcq);
	int got = 0;

	if (n < 0)
		return -EINVAL;
	pthread_mutex_lock(&c->mu);
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
	pthread_mutex_unlock(&c->mu);
	return got;
}
