/* SPDX-License-Identifier: MIT */
/* Description: a CQ that overflows behaves as a NIC's: ibv_poll_cq fails from then on, the program gets one IBV_EVENT_CQ_ERR naming the CQ from ibv_get_async_event, the QPs that complete into it go to the error state, and ibv_destroy_cq (after the QP) works once the event is acknowledged */
/* Channels: shm host-tcp */
#include "verbstest.h"

#define CQE 4

int main(int argc, char **argv)
{
	struct ibv_qp_init_attr ia;
	struct ibv_async_event ev;
	struct ibv_qp_attr qa;
	struct tv_end e;
	static uint8_t buf[64];
	struct ibv_ah *ah;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	int sent = 0;

	(void)argc;
	tv_setup(argv);
	tv_device(&e, NULL);
	TV_MUST(ibv_resize_cq(e.cq, CQE) == 0, "a CQ of %d entries", CQE);
	tv_ud_qp(&e);
	mr = ibv_reg_mr(e.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	TV_MUST(mr, "register: %s", strerror(errno));
	ah = tv_ah(&e, 0);
	/* Signaled sends, never polled: the fifth finds the CQ full. */
	for (int i = 0; i < CQE + 2; i++) {
		struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
		struct ibv_send_wr w = { .wr_id = (uint64_t)i, .sg_list = &s, .num_sge = 1,
					 .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
					 .wr.ud = { .ah = ah, .remote_qpn = 0xfffff0, .remote_qkey = TV_QKEY } },
				   *bad;

		sent += ibv_post_send(e.qp, &w, &bad) == 0;
	}
	CHECK(sent >= CQE + 1, "only %d sends posted", sent);
	CHECK(ibv_poll_cq(e.cq, 1, &wc) < 0, "ibv_poll_cq of an overflowed CQ did not fail");
	CHECK(ibv_query_qp(e.qp, &qa, IBV_QP_STATE, &ia) == 0 && qa.qp_state == IBV_QPS_ERR,
	      "the QP of an overflowed CQ is in state %d, want ERR", qa.qp_state);
	{
		struct pollfd p = { .fd = e.ctx->async_fd, .events = POLLIN };

		TV_MUST(poll(&p, 1, 10000) == 1, "no asynchronous event within 10 s");
	}
	TV_MUST(ibv_get_async_event(e.ctx, &ev) == 0, "ibv_get_async_event: %s", strerror(errno));
	CHECK(ev.event_type == IBV_EVENT_CQ_ERR && ev.element.cq == e.cq, "event %d (%s), want CQ_ERR of our CQ",
	      ev.event_type, ibv_event_type_str(ev.event_type));
	ibv_ack_async_event(&ev);
	CHECK(ibv_destroy_qp(e.qp) == 0 && ibv_destroy_cq(e.cq) == 0, "destroy the QP, then the CQ: %s",
	      strerror(errno));
	return t_shim_finish();
}
