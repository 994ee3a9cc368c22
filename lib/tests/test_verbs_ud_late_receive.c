/* SPDX-License-Identifier: MIT */
/* Description: a datagram that arrives at a UD QP with no receive posted waits in its lane, and the receive posted later takes it at once: a program that armed its CQ, posted the receive and sleeps in ibv_get_cq_event is woken, without polling, and gets the datagram intact */
/* Channels: shm host-tcp */
#include "verbstest.h"

int main(int argc, char **argv)
{
	struct ibv_comp_channel *ch;
	struct tv_end e;
	static uint8_t buf[40 + 64];
	struct ibv_ah *ah;
	struct ibv_mr *mr;
	struct ibv_wc wc;

	(void)argc;
	tv_setup(argv);
	tv_device(&e, &ch);
	tv_ud_qp(&e);
	mr = ibv_reg_mr(e.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	TV_MUST(mr, "register: %s", strerror(errno));
	ah = tv_ah(&e, 0);
	/* To our own QP, before any receive: the send completes, the datagram waits in the lane. */
	CHECK(tv_send_dgram(&e, e.qp, mr, ah, e.qp->qp_num, TV_QKEY, 64, 3) == IBV_WC_SUCCESS, "the datagram");
	TV_MUST(ibv_req_notify_cq(e.cq, 0) == 0, "arm the CQ");
	memset(buf, 0, sizeof(buf));
	tv_post_recv(&e, mr, 4);
	tv_event(&e, ch, "the receive posted after its datagram");
	ibv_ack_cq_events(e.cq, 1);
	TV_MUST(ibv_poll_cq(e.cq, 1, &wc) == 1, "the receive's completion");
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 4 && wc.byte_len == 40 + 64,
	      "the receive: status %d wr_id %llu len %u", wc.status, (unsigned long long)wc.wr_id, wc.byte_len);
	for (uint32_t k = 0; k < 64; k++)
		if (buf[40 + k] != tv_pattern(3, k)) {
			CHECK(0, "byte %u of the datagram wrong", k);
			break;
		}
	return t_shim_finish();
}
