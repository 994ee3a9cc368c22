/* SPDX-License-Identifier: MIT */
/* Description: an RC QP moves RESET -> INIT -> RTR -> RTS only with the attributes the IB spec requires for each step, as a NIC's driver checks them: skipped states, missing attributes, another port or P_Key index fail with EINVAL and leave the state; work requests in the wrong state are refused; to ERR flushes the posted receives; to RESET drops them without completions */
/* Channels: shm host-tcp */
#include "verbstest.h"

static int state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	TV_MUST(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) == 0, "query the QP");
	return a.qp_state;
}

int main(int argc, char **argv)
{
	const int init_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	const int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
						.max_recv_sge = 1 } };
	struct ibv_qp_attr a = { 0 };
	struct ibv_recv_wr rwr = { .wr_id = 5 }, *rbad;
	struct ibv_send_wr swr = { .wr_id = 6, .opcode = IBV_WR_SEND }, *sbad;
	struct tv_end e;
	struct ibv_qp *qp;
	struct ibv_wc wc;

	(void)argc;
	tv_setup(argv);
	tv_open(&e);
	ia.send_cq = ia.recv_cq = e.cq;
	qp = ibv_create_qp(e.pd, &ia);
	TV_MUST(qp && state(qp) == IBV_QPS_RESET, "a new QP is in RESET");
	CHECK(ibv_post_recv(qp, &rwr, &rbad) == EINVAL, "a receive posted in RESET was taken");

	a.qp_state = IBV_QPS_RTR;
	CHECK(ibv_modify_qp(qp, &a, rtr_mask) == EINVAL && state(qp) == IBV_QPS_RESET, "RESET -> RTR passed");
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT) == EINVAL, "RESET -> INIT without P_Key index and access passed");
	a.port_num = 2;
	CHECK(ibv_modify_qp(qp, &a, init_mask) == EINVAL, "RESET -> INIT on port 2 passed");
	a.port_num = 1;
	a.pkey_index = 3;
	CHECK(ibv_modify_qp(qp, &a, init_mask) == EINVAL, "RESET -> INIT with P_Key index 3 passed");
	a.pkey_index = 0;
	TV_MUST(ibv_modify_qp(qp, &a, init_mask) == 0 && state(qp) == IBV_QPS_INIT, "RESET -> INIT");
	CHECK(ibv_post_send(qp, &swr, &sbad) == EINVAL && sbad == &swr, "a send posted in INIT was taken");
	a.qp_state = IBV_QPS_RTS;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == EINVAL && state(qp) == IBV_QPS_INIT, "INIT -> RTS passed");
	a.qp_state = IBV_QPS_RTR;
	CHECK(ibv_modify_qp(qp, &a, rtr_mask & ~IBV_QP_DEST_QPN) == EINVAL, "INIT -> RTR without a destination QP passed");
	a.dest_qp_num = 0xfffff0;	/* nobody: RTR does not need the peer to exist yet */
	a.path_mtu = IBV_MTU_4096;
	a.ah_attr.dlid = 0x102;
	TV_MUST(ibv_modify_qp(qp, &a, rtr_mask) == 0 && state(qp) == IBV_QPS_RTR, "INIT -> RTR");
	CHECK(ibv_post_recv(qp, &rwr, &rbad) == 0, "a receive posted in RTR was refused");
	a.qp_state = IBV_QPS_RTS;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == EINVAL, "RTR -> RTS without timeout and retries passed");
	/* The peer that does not exist: the send fails as unreachable, the receive is flushed. */
	a.timeout = 14, a.retry_cnt = 7, a.rnr_retry = 7, a.max_rd_atomic = 1;
	TV_MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			      IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC) == 0 && state(qp) == IBV_QPS_RTS, "RTR -> RTS");
	swr.send_flags = IBV_SEND_SIGNALED;
	CHECK(ibv_post_send(qp, &swr, &sbad) == 0, "post a send in RTS");
	wc = tv_wait(&e);
	CHECK(wc.wr_id == 6 && wc.status == IBV_WC_RETRY_EXC_ERR, "a send to no QP: status %d, want retries exceeded", wc.status);
	wc = tv_wait(&e);
	CHECK(wc.wr_id == 5 && wc.status == IBV_WC_WR_FLUSH_ERR, "the posted receive: status %d, want flushed", wc.status);
	CHECK(state(qp) == IBV_QPS_ERR, "the QP is not in ERR after a failed request");
	/* RESET drops what is posted, silently; the QP starts over. */
	a.qp_state = IBV_QPS_RESET;
	TV_MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0 && state(qp) == IBV_QPS_RESET, "ERR -> RESET");
	a.qp_state = IBV_QPS_INIT;
	TV_MUST(ibv_modify_qp(qp, &a, init_mask) == 0, "RESET -> INIT again");
	CHECK(ibv_post_recv(qp, &rwr, &rbad) == 0, "a receive in INIT");
	a.qp_state = IBV_QPS_RESET;
	TV_MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "INIT -> RESET");
	CHECK(ibv_poll_cq(e.cq, 1, &wc) == 0, "RESET made a completion");
	CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_qp(e.qp) == 0, "destroy the QPs");
	CHECK(ibv_destroy_cq(e.cq) == 0 && ibv_dealloc_pd(e.pd) == 0 && ibv_close_device(e.ctx) == 0,
	      "close the device");
	return t_shim_finish();
}
