/* SPDX-License-Identifier: MIT */
/* Description: two QPs share an SRQ; one, half way through a 2 MiB message, is moved to ERR: only the receive it holds completes flushed, the SRQ's others stay for the other QP, whose messages then land in them intact; the QP that failed gets IBV_EVENT_QP_LAST_WQE_REACHED from ibv_get_async_event, and destroying it after the acknowledgement does not wait */
#include "verbstest.h"

#define BIG	(2u << 20)
static const uint32_t sizes[] = { 100, 5000, 1 };
#define N	(sizeof(sizes) / sizeof(sizes[0]))

/* The peer: QP a half way through a 2 MiB SEND, then N messages on QP b. */
static int peer(int sock)
{
	struct tv_end a, b;
	struct ibv_mr *mr;

	tv_open(&a);
	b = a;
	/* Its own CQ: QP a's send fails once its peer QP is gone. */
	b.cq = ibv_create_cq(b.ctx, 16, NULL, NULL, 0);
	TV_MUST(b.cq, "a second CQ: %s", strerror(errno));
	tv_qp(&b);
	mr = tv_region(&a, BIG * 2, 0);
	tv_link(sock, &a);
	tv_link(sock, &b);
	/* The first megabyte goes into the ring; the rest waits for room that never comes. */
	tv_send(&a, mr, mr->addr, BIG, 99);
	tv_say(sock, 'a');
	tv_hear(sock, 'b');
	for (size_t i = 0; i < N; i++) {
		tv_send(&b, mr, (uint8_t *)mr->addr + BIG, sizes[i], (uint32_t)i);
		CHECK(tv_wait(&b).status == IBV_WC_SUCCESS, "send %zu on the QP that stays", i);
	}
	tv_hear(sock, 'x');
	return 0;
}

int main(int argc, char **argv)
{
	struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
	struct pollfd pf;
	struct ibv_async_event ev;
	struct tv_end e, a, b;
	struct tv_name pb;
	struct ibv_srq *srq;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	uint8_t *buf;
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(peer, &sock);
	tv_device(&e, NULL);
	srq = tv_srq(&e, 8, NULL);
	mr = tv_region(&e, BIG * (N + 1), IBV_ACCESS_LOCAL_WRITE);
	buf = mr->addr;
	for (uint64_t w = 0; w <= N; w++)
		tv_post_srq(srq, mr, buf + w * BIG, BIG, w);
	a = b = e;
	tv_qp_srq(&a, srq);
	tv_qp_srq(&b, srq);
	tv_link(sock, &a);
	pb = tv_link(sock, &b);

	tv_hear(sock, 'a');
	TV_MUST(ibv_poll_cq(e.cq, 1, &wc) == 0, "half a message completed");
	TV_MUST(ibv_modify_qp(a.qp, &err, IBV_QP_STATE) == 0, "QP a to ERR");
	wc = tv_wait(&e);
	CHECK(wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 0 && wc.qp_num == a.qp->qp_num,
	      "the receive QP a held: status %d wr_id %llu qp_num %#x, want flushed, 0, %#x",
	      wc.status, (unsigned long long)wc.wr_id, wc.qp_num, a.qp->qp_num);
	CHECK(ibv_poll_cq(e.cq, 1, &wc) == 0, "a receive of the SRQ was flushed too (wr_id %llu)",
	      (unsigned long long)wc.wr_id);
	pf = (struct pollfd){ .fd = e.ctx->async_fd, .events = POLLIN };
	TV_MUST(poll(&pf, 1, 10000) == 1, "no asynchronous event within 10 s");
	TV_MUST(ibv_get_async_event(e.ctx, &ev) == 0, "ibv_get_async_event: %s", strerror(errno));
	CHECK(ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED && ev.element.qp == a.qp,
	      "event %d for %p, want LAST_WQE_REACHED (%d) for QP a %p", ev.event_type,
	      (void *)ev.element.qp, IBV_EVENT_QP_LAST_WQE_REACHED, (void *)a.qp);
	ibv_ack_async_event(&ev);
	CHECK(ibv_destroy_qp(a.qp) == 0, "destroy QP a");

	tv_say(sock, 'b');
	for (size_t i = 0; i < N; i++) {
		wc = tv_wait(&e);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == i + 1 && wc.qp_num == b.qp->qp_num &&
		      wc.src_qp == pb.qpn && wc.byte_len == sizes[i],
		      "message %zu on QP b: status %d wr_id %llu qp_num %#x len %u", i, wc.status,
		      (unsigned long long)wc.wr_id, wc.qp_num, wc.byte_len);
		tv_intact(buf + (i + 1) * BIG, (uint32_t)i, sizes[i], "a message on QP b");
	}
	tv_say(sock, 'x');
	tv_join(pid);
	CHECK(ibv_destroy_qp(b.qp) == 0 && ibv_destroy_srq(srq) == 0, "destroy QP b and the SRQ");
	return t_shim_finish();
}
