/* SPDX-License-Identifier: MIT */
/* Description: a UD QP taken back to RESET and made ready again takes only the datagrams sent after: one that waited in its lane for a receive before the reset is dropped, as a NIC's QP in RESET drops what it holds */
/* Channels: shm host-tcp */
#include "verbstest.h"

#define LEN	80

int main(int argc, char **argv)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };
	static uint8_t buf[2][40 + LEN];
	struct ibv_mr *mr[2];
	struct tv_end e;
	struct ibv_ah *ah;
	struct ibv_wc wc;
	int64_t end;

	(void)argc;
	tv_setup(argv);
	tv_device(&e, NULL);
	tv_ud_qp(&e);
	for (int i = 0; i < 2; i++) {
		mr[i] = ibv_reg_mr(e.pd, buf[i], sizeof(buf[i]), IBV_ACCESS_LOCAL_WRITE);
		TV_MUST(mr[i], "register: %s", strerror(errno));
	}
	ah = tv_ah(&e, 0);
	/* To our own QP, before any receive: it waits in the lane. */
	CHECK(tv_send_dgram(&e, e.qp, mr[0], ah, e.qp->qp_num, TV_QKEY, LEN - 20, 3) == IBV_WC_SUCCESS,
	      "the datagram before the reset");
	TV_MUST(ibv_poll_cq(e.cq, 1, &wc) == 0, "a completion with no receive posted");
	TV_MUST(ibv_modify_qp(e.qp, &a, IBV_QP_STATE) == 0, "UD QP to RESET: %s", strerror(errno));
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = TV_QKEY };
	TV_MUST(ibv_modify_qp(e.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0,
		"UD QP to INIT again");
	a.qp_state = IBV_QPS_RTR;
	TV_MUST(ibv_modify_qp(e.qp, &a, IBV_QP_STATE) == 0, "UD QP to RTR again");
	a.qp_state = IBV_QPS_RTS;
	TV_MUST(ibv_modify_qp(e.qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0, "UD QP to RTS again");
	CHECK(tv_send_dgram(&e, e.qp, mr[1], ah, e.qp->qp_num, TV_QKEY, LEN, 5) == IBV_WC_SUCCESS,
	      "the datagram after the reset");
	memset(buf, 0, sizeof(buf));
	tv_post_recv(&e, mr[0], 10);
	tv_post_recv(&e, mr[1], 11);
	wc = tv_wait(&e);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 10 && wc.byte_len == 40 + LEN,
	      "the first receive: status %d wr_id %llu len %u, want the datagram after the reset (len %u; %u: the one before)",
	      wc.status, (unsigned long long)wc.wr_id, wc.byte_len, 40 + LEN, 40 + LEN - 20);
	tv_intact(buf[0] + 40, 5, LEN, "the datagram after the reset");
	for (end = t_ms() + 200; t_ms() < end;)
		CHECK(ibv_poll_cq(e.cq, 1, &wc) == 0, "another datagram: wr_id %llu len %u",
		      (unsigned long long)wc.wr_id, wc.byte_len);
	return t_shim_finish();
}
