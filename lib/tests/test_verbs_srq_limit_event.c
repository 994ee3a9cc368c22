/* SPDX-License-Identifier: MIT */
/* Description: an SRQ's armed srq_limit: once a message takes a receive and fewer than the limit are left, ibv_get_async_event gives one IBV_EVENT_SRQ_LIMIT_REACHED naming the SRQ, and the limit is disarmed (query_srq: 0, no second event); receives posted before a resize are taken in order; an event not read yet is dropped when its SRQ is destroyed, which does not wait for it */
#include "verbstest.h"

#define LEN	1000
#define MSGS	6

static int peer(int sock)
{
	struct tv_end e;
	struct ibv_mr *mr;

	tv_open(&e);
	mr = tv_region(&e, LEN, 0);
	tv_link(sock, &e);
	for (uint32_t id = 0; id < MSGS; id++) {
		tv_hear(sock, 'n');
		tv_send(&e, mr, mr->addr, LEN, id);
		CHECK(tv_wait(&e).status == IBV_WC_SUCCESS, "send %u", id);
	}
	tv_hear(sock, 'x');
	return 0;
}

/* Whether an asynchronous event is there to read within ms. */
static int async_ready(struct tv_end *e, int ms)
{
	struct pollfd p = { .fd = e->ctx->async_fd, .events = POLLIN };

	return poll(&p, 1, ms) == 1;
}

/* Message id arrives in receive id (posted in order). */
static void one(int sock, struct tv_end *e, uint8_t *buf, uint32_t id)
{
	struct ibv_wc wc;

	tv_say(sock, 'n');
	wc = tv_wait(e);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == id && wc.byte_len == LEN,
	      "message %u: status %d wr_id %llu len %u", id, wc.status, (unsigned long long)wc.wr_id,
	      wc.byte_len);
	tv_intact(buf + id * LEN, id, LEN, "a message");
}

static void limit(struct ibv_srq *srq, uint32_t n)
{
	struct ibv_srq_attr a = { .srq_limit = n };

	TV_MUST(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT) == 0, "arm the limit at %u", n);
}

int main(int argc, char **argv)
{
	struct ibv_srq_attr attr = { .max_wr = 16 };
	struct ibv_async_event ev;
	struct tv_end e;
	struct ibv_srq *srq;
	struct ibv_mr *mr;
	uint8_t *buf;
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(peer, &sock);
	tv_device(&e, NULL);
	srq = tv_srq(&e, 8, &e);
	mr = tv_region(&e, LEN * 10, IBV_ACCESS_LOCAL_WRITE);
	buf = mr->addr;
	for (uint32_t w = 0; w < 8; w++)
		tv_post_srq(srq, mr, buf + w * LEN, LEN, w);
	TV_MUST(ibv_modify_srq(srq, &attr, IBV_SRQ_MAX_WR) == 0, "resize the SRQ to 16");
	for (uint32_t w = 8; w < 10; w++)
		tv_post_srq(srq, mr, buf + w * LEN, LEN, w);
	limit(srq, 7);
	tv_qp_srq(&e, srq);
	tv_link(sock, &e);

	/* 10 posted, limit 7: three messages leave 7, not fewer. */
	for (uint32_t id = 0; id < 3; id++)
		one(sock, &e, buf, id);
	CHECK(!async_ready(&e, 0), "an event with 7 receives left and the limit at 7");
	one(sock, &e, buf, 3);
	TV_MUST(async_ready(&e, 10000), "no event within 10 s once 6 receives were left");
	TV_MUST(ibv_get_async_event(e.ctx, &ev) == 0, "ibv_get_async_event: %s", strerror(errno));
	CHECK(ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == srq &&
	      ev.element.srq->srq_context == &e, "event %d for %p, want SRQ_LIMIT_REACHED (%d) for %p",
	      ev.event_type, (void *)ev.element.srq, IBV_EVENT_SRQ_LIMIT_REACHED, (void *)srq);
	ibv_ack_async_event(&ev);
	TV_MUST(ibv_query_srq(srq, &attr) == 0, "query the SRQ");
	CHECK(attr.srq_limit == 0 && attr.max_wr == 16, "after the event: srq_limit %u max_wr %u, want 0 16",
	      attr.srq_limit, attr.max_wr);
	one(sock, &e, buf, 4);
	CHECK(!async_ready(&e, 0), "a second event from a disarmed limit");

	/* Armed again, fired, not read: destroy_srq drops it and does not wait for it. */
	limit(srq, 5);
	one(sock, &e, buf, 5);
	TV_MUST(async_ready(&e, 10000), "no event within 10 s once 4 receives were left");
	tv_say(sock, 'x');
	tv_join(pid);
	CHECK(ibv_destroy_qp(e.qp) == 0 && ibv_destroy_srq(srq) == 0, "destroy the QP and the SRQ");
	CHECK(!async_ready(&e, 0), "an event of a destroyed SRQ is still there to read");
	return t_shim_finish();
}
