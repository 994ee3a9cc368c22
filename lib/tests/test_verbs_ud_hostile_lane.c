/* SPDX-License-Identifier: MIT */
/* Description: a hostile sender that writes nonsense into its own UD lane (a datagram larger than the MTU, a piece of a message, an unknown op) breaks only its own datagrams: the receiving UD QP stays usable, takes no byte of the nonsense, and another sender's datagram after it arrives intact; the hostile sender's earlier datagram arrived as sent */
#include "verbstest.h"

#define GRH	40

static int receiver(int sock)
{
	struct tv_end e;
	struct tv_name me, peer[2];
	static uint8_t buf[4][GRH + 8192];
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr ia;
	struct ibv_mr *mr;
	struct ibv_wc wc;

	tv_device(&e, NULL);
	tv_ud_qp(&e);
	mr = ibv_reg_mr(e.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	TV_MUST(mr, "register the receive buffers: %s", strerror(errno));
	for (uint64_t i = 0; i < 4; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf[i], .length = sizeof(buf[i]), .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;

		TV_MUST(ibv_post_recv(e.qp, &wr, &bad) == 0, "post receive %llu", (unsigned long long)i);
	}
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	peer[0] = tv_trade(sock, &me);
	peer[1] = tv_trade(sock, &me);
	/* The hostile sender's honest first datagram, then (after its nonsense) the other's. */
	for (int k = 0; k < 2; k++) {
		wc = tv_wait(&e);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)k && wc.src_qp == peer[k].qpn &&
		      wc.byte_len == GRH + 20 && ntohl(wc.imm_data) == 10u + k,
		      "datagram %d: status %d wr_id %llu src_qp %#x (want %#x) len %u imm %u", k, wc.status,
		      (unsigned long long)wc.wr_id, wc.src_qp, peer[k].qpn, wc.byte_len, ntohl(wc.imm_data));
		for (uint32_t i = 0; i < 20; i++)
			if (buf[k][GRH + i] != tv_pattern(10 + k, i)) {
				CHECK(0, "datagram %d: byte %u wrong", k, i);
				break;
			}
	}
	CHECK(ibv_poll_cq(e.cq, 1, &wc) == 0, "a completion of the hostile sender's nonsense");
	CHECK(ibv_query_qp(e.qp, &qa, IBV_QP_STATE, &ia) == 0 && qa.qp_state == IBV_QPS_RTS,
	      "the receiving QP left RTS (state %d)", qa.qp_state);
	for (size_t i = 0; i < sizeof(buf[2]); i++)
		if (buf[2][i] == 0x41) {
			CHECK(0, "a byte of the nonsense reached a receive buffer");
			break;
		}
	tv_say(sock, 'd');
	return 0;
}

int main(int argc, char **argv)
{
	struct tv_end bad, good;
	struct tv_name me, peer;
	static uint8_t buf[64];
	struct ibv_ah *ah;
	struct ibv_mr *mr;
	uint8_t *lane;
	uint64_t prod;
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(receiver, &sock);
	tv_device(&bad, NULL);
	tv_ud_qp(&bad);
	good = bad;
	good.cq = ibv_create_cq(bad.ctx, 16, NULL, NULL, 0);
	TV_MUST(good.cq, "a second CQ");
	tv_ud_qp(&good);
	mr = ibv_reg_mr(bad.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	TV_MUST(mr, "register: %s", strerror(errno));
	me = (struct tv_name){ .qpn = bad.qp->qp_num, .lid = 0x102 };
	peer = tv_trade(sock, &me);
	me.qpn = good.qp->qp_num;
	tv_trade(sock, &me);
	ah = tv_ah(&bad, 0);
	TV_MUST(tv_send_dgram(&bad, bad.qp, mr, ah, peer.qpn, TV_QKEY, 20, 10) == IBV_WC_SUCCESS,
		"the hostile sender's honest datagram");
	lane = tv_written_ring();	/* our lane: we sent into it */
	TV_MUST(lane, "find our lane");
	prod = *(uint64_t *)(lane + FF_VQP_OFF_PROD);
	{
		uint8_t *ring = lane + FF_VQP_HDR_SIZE + prod;

		tv_rec(ring, 8192, FF_VQP_OP_SEND, FF_VQP_FIRST | FF_VQP_LAST, TV_QKEY);	/* past the MTU */
		tv_rec(ring + 16 + 8192, 16, FF_VQP_OP_SEND, FF_VQP_FIRST, TV_QKEY);	/* a piece */
		tv_rec(ring + 48 + 8192, 16, 9, FF_VQP_FIRST | FF_VQP_LAST, TV_QKEY);	/* no such op */
		memset(ring + 16, 0x41, 8192);
		memset(ring + 32 + 8192, 0x41, 16);
		memset(ring + 64 + 8192, 0x41, 16);
		__atomic_store_n((uint64_t *)(lane + FF_VQP_OFF_PROD), prod + 80 + 8192, __ATOMIC_RELEASE);
	}
	TV_MUST(tv_send_dgram(&good, good.qp, mr, ah, peer.qpn, TV_QKEY, 20, 11) == IBV_WC_SUCCESS,
		"the other sender's datagram");
	tv_hear(sock, 'd');
	tv_join(pid);
	return t_shim_finish();
}
