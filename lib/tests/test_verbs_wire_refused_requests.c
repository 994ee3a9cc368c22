/* SPDX-License-Identifier: MIT */
/* Description: across hosts the target checks each one-sided request against its own regions and QP: a READ with an rkey it never gave fails with a remote access error and the QP goes to error, flushing what was posted after it, and the target's QP sees the link end (its receive flushed, no hang); a WRITE into a region that allows only reads lands nowhere, and since it completed when written, the initiator's QP goes to error with an IBV_EVENT_QP_ACCESS_ERR event */
/* Channels: host-tcp */
#include "verbstest.h"

/* One pair per scenario: the target registers a read-only region and waits. */
static int target(int sock)
{
	for (int round = 0; round < 2; round++) {
		struct tv_end e;
		struct ibv_mr *ro, *rx;
		struct tv_name me, peer;
		struct ibv_wc wc;

		tv_open(&e);
		ro = tv_region(&e, 4096, IBV_ACCESS_REMOTE_READ);
		rx = tv_region(&e, 64, IBV_ACCESS_LOCAL_WRITE);
		memset(ro->addr, 0x5a, 4096);
		tv_post_recv(&e, rx, 9);
		me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102, .rkey = ro->rkey, .addr = (uintptr_t)ro->addr };
		peer = tv_trade(sock, &me);
		tv_connect(&e, &peer);
		/* The initiator's QP failed: the link ends, our receive is flushed. */
		wc = tv_wait(&e);
		CHECK(wc.wr_id == 9 && wc.status == IBV_WC_WR_FLUSH_ERR,
		      "round %d: the target's receive after the link ended: wr %llu status %d, want flushed",
		      round, (unsigned long long)wc.wr_id, wc.status);
		for (int i = 0; i < 4096; i++)
			if (((uint8_t *)ro->addr)[i] != 0x5a) {
				CHECK(0, "round %d: byte %d of the read-only region changed", round, i);
				break;
			}
		tv_say(sock, 'k');
		TV_MUST(ibv_destroy_qp(e.qp) == 0, "destroy the QP");
	}
	return 0;
}

int main(int argc, char **argv)
{
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(target, &sock);
	for (int round = 0; round < 2; round++) {
		struct tv_end e;
		struct tv_name me, peer;
		struct ibv_mr *mr = NULL;
		struct ibv_sge sge;
		struct ibv_send_wr w[2], *bad;
		struct ibv_wc wc;
		struct ibv_qp_attr qa;
		struct ibv_qp_init_attr ia;

		tv_open(&e);
		mr = tv_region(&e, 4096, IBV_ACCESS_LOCAL_WRITE);
		memset(mr->addr, 0x77, 4096);
		me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
		peer = tv_trade(sock, &me);
		tv_connect(&e, &peer);
		sge = (struct ibv_sge){ .addr = (uintptr_t)mr->addr, .length = 64, .lkey = mr->lkey };
		w[0] = (struct ibv_send_wr){ .wr_id = 1, .sg_list = &sge, .num_sge = 1, .send_flags = IBV_SEND_SIGNALED,
					     .next = &w[1] };
		if (round == 0) {
			w[0].opcode = IBV_WR_RDMA_READ;
			w[0].wr.rdma = (typeof(w[0].wr.rdma)){ .remote_addr = peer.addr, .rkey = peer.rkey ^ 0x10101 };
		} else {
			w[0].opcode = IBV_WR_RDMA_WRITE;
			w[0].wr.rdma = (typeof(w[0].wr.rdma)){ .remote_addr = peer.addr, .rkey = peer.rkey };
		}
		/* Fenced: it starts only once the first is answered (a READ) or written (a WRITE). */
		w[1] = (struct ibv_send_wr){ .wr_id = 2, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
					     .send_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE,
					     .wr.rdma = { .remote_addr = peer.addr, .rkey = peer.rkey } };
		TV_MUST(ibv_post_send(e.qp, w, &bad) == 0, "round %d: post", round);
		wc = tv_wait(&e);
		if (round == 0) {
			CHECK(wc.wr_id == 1 && wc.status == IBV_WC_REM_ACCESS_ERR,
			      "a READ with an unknown rkey: wr %llu status %d, want a remote access error",
			      (unsigned long long)wc.wr_id, wc.status);
			wc = tv_wait(&e);
			CHECK(wc.wr_id == 2 && wc.status == IBV_WC_WR_FLUSH_ERR,
			      "the request after it: wr %llu status %d, want flushed", (unsigned long long)wc.wr_id, wc.status);
		} else {
			struct ibv_async_event ev;

			CHECK(wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS,
			      "a WRITE completes once written: wr %llu status %d", (unsigned long long)wc.wr_id, wc.status);
			wc = tv_wait(&e);
			CHECK(wc.wr_id == 2 && wc.status != IBV_WC_SUCCESS,
			      "the READ after a refused WRITE: wr %llu status %d, want an error",
			      (unsigned long long)wc.wr_id, wc.status);
			TV_MUST(ibv_get_async_event(e.ctx, &ev) == 0, "the asynchronous event");
			CHECK(ev.event_type == IBV_EVENT_QP_ACCESS_ERR && ev.element.qp == e.qp,
			      "event %d, want IBV_EVENT_QP_ACCESS_ERR of the QP", ev.event_type);
			ibv_ack_async_event(&ev);
		}
		CHECK(ibv_query_qp(e.qp, &qa, IBV_QP_STATE, &ia) == 0 && qa.qp_state == IBV_QPS_ERR,
		      "round %d: the initiator's QP is in state %d, want ERR", round, qa.qp_state);
		tv_hear(sock, 'k');
		TV_MUST(ibv_destroy_qp(e.qp) == 0, "destroy the QP");
	}
	tv_join(pid);
	return t_exit_code();
}
