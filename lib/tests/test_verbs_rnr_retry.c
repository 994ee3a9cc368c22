/* SPDX-License-Identifier: MIT */
/* Description: RNR as a NIC counts it: a SEND through a QP with rnr_retry below 7 to a peer that posts no receive completes with IBV_WC_RNR_RETRY_EXC_ERR once the retries (rnr_retry times the peer's RNR timer) are spent, and its QP goes to ERR; one whose receive comes within them waits for it and arrives intact (rnr_retry 7, for ever, is test_verbs_rc_send_recv's) */
#include "verbstest.h"

struct names {
	struct tv_name a, b;
};

/* Two QPs: a (RNR timer 10 µs) never posts a receive; b (655 ms) posts one when told. */
static int receiver(int sock)
{
	struct tv_end a, b;
	struct names me, peer;
	static uint8_t buf[64];
	struct ibv_mr *mr;

	tv_open(&a);
	b = a;
	tv_qp(&b);
	mr = ibv_reg_mr(a.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	TV_MUST(mr, "register: %s", strerror(errno));
	me = (struct names){ { .qpn = a.qp->qp_num, .lid = 0x102 }, { .qpn = b.qp->qp_num, .lid = 0x102 } };
	TV_MUST(write(sock, &me, sizeof(me)) == sizeof(me) && read(sock, &peer, sizeof(peer)) == sizeof(peer),
		"trade names");
	tv_connect_rnr(&a, &peer.a, 1, 7);
	tv_connect_rnr(&b, &peer.b, 0, 7);
	tv_hear(sock, 'b');
	usleep(50000);	/* well within the sender's 3 x 655 ms */
	tv_post_recv(&b, mr, 9);
	tv_got(&b, mr, 9, 32);
	tv_say(sock, 'k');
	return 0;
}

static enum ibv_wc_status send32(struct tv_end *e, struct ibv_mr *mr, uint64_t id)
{
	struct ibv_sge s = { .addr = (uintptr_t)mr->addr, .length = 32, .lkey = mr->lkey };
	struct ibv_send_wr w = { .wr_id = id, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_wc wc;

	for (uint32_t k = 0; k < 32; k++)
		((uint8_t *)mr->addr)[k] = tv_pattern((uint32_t)id, k);
	TV_MUST(ibv_post_send(e->qp, &w, &bad) == 0, "post a SEND: %s", strerror(errno));
	wc = tv_wait(e);
	CHECK(wc.wr_id == id, "the SEND's completion: wr_id %llu", (unsigned long long)wc.wr_id);
	return wc.status;
}

int main(int argc, char **argv)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr qa;
	struct tv_end a, b;
	struct names me, peer;
	static uint8_t buf[64];
	enum ibv_wc_status st;
	struct ibv_mr *mr;
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(receiver, &sock);
	tv_open(&a);
	b = a;
	b.cq = ibv_create_cq(a.ctx, 16, NULL, NULL, 0);
	TV_MUST(b.cq, "a second CQ");
	tv_qp(&b);
	mr = ibv_reg_mr(a.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	TV_MUST(mr, "register: %s", strerror(errno));
	me = (struct names){ { .qpn = a.qp->qp_num, .lid = 0x102 }, { .qpn = b.qp->qp_num, .lid = 0x102 } };
	TV_MUST(read(sock, &peer, sizeof(peer)) == sizeof(peer) && write(sock, &me, sizeof(me)) == sizeof(me),
		"trade names");
	tv_connect_rnr(&a, &peer.a, 12, 1);
	tv_connect_rnr(&b, &peer.b, 12, 3);
	st = send32(&a, mr, 1);
	CHECK(st == IBV_WC_RNR_RETRY_EXC_ERR, "a SEND nobody posts a receive for, rnr_retry 1: status %d (%s), want RNR retries exceeded",
	      st, ibv_wc_status_str(st));
	CHECK(ibv_query_qp(a.qp, &qa, IBV_QP_STATE, &ia) == 0 && qa.qp_state == IBV_QPS_ERR,
	      "the QP after RNR retries exceeded: state %d, want ERR", qa.qp_state);
	tv_say(sock, 'b');
	st = send32(&b, mr, 9);
	CHECK(st == IBV_WC_SUCCESS, "a SEND whose receive comes within the retries: status %d (%s)", st,
	      ibv_wc_status_str(st));
	tv_hear(sock, 'k');
	tv_join(pid);
	return t_shim_finish();
}
