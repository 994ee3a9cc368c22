/* SPDX-License-Identifier: MIT */
/* Description: a SEND to a peer whose QP is gone is retried as a NIC retries a peer that stopped answering: it completes with IBV_WC_RETRY_EXC_ERR only once the QP's retry budget (timeout, retry_cnt) is spent, not at once, and the QP stays in RTS meanwhile; so a program that sent a few messages past its peer's last expected one (ibv_srq_pingpong does, up to one per QP) and stops polling when its own count is reached never sees an error (it failed about one run in three) */
#include "verbstest.h"

static int peer(int sock)
{
	struct tv_end e;
	struct tv_name me, other;
	static char buf[16];
	struct ibv_mr *mr;

	tv_open(&e);
	mr = ibv_reg_mr(e.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	TV_MUST(mr, "register: %s", strerror(errno));
	tv_post_recv(&e, mr, 1);
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	other = tv_trade(sock, &me);
	tv_connect(&e, &other);
	TV_MUST(tv_wait(&e).status == IBV_WC_SUCCESS, "the one message it expects");
	TV_MUST(ibv_destroy_qp(e.qp) == 0, "destroy the QP");
	tv_say(sock, 'd');
	tv_hear(sock, 'x');
	return 0;
}

int main(int argc, char **argv)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr qa;
	struct tv_end e;
	struct tv_name me, other;
	static char buf[16] = "one too many";
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = sizeof(buf) };
	struct ibv_send_wr w = { .wr_id = 5, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE }, *bad;
	struct ibv_wc wc;
	int64_t until;
	int n = 0;
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(peer, &sock);
	tv_open(&e);
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	other = tv_trade(sock, &me);
	tv_connect(&e, &other);	/* timeout 14, retry_cnt 7: 8 x 67 ms */
	TV_MUST(ibv_post_send(e.qp, &w, &bad) == 0 && tv_wait(&e).status == IBV_WC_SUCCESS,
		"the message the peer expects");
	tv_hear(sock, 'd');	/* its QP is gone */
	TV_MUST(ibv_post_send(e.qp, &w, &bad) == 0, "post a SEND to the QP that is gone: %s", strerror(errno));
	/* A NIC retries first: nothing for a while (20 ms of a budget of half a second). */
	for (until = t_ms() + 20; t_ms() < until && n == 0;)
		n = ibv_poll_cq(e.cq, 1, &wc);
	CHECK(n == 0, "the SEND completed at once (status %d), before any retry", wc.status);
	CHECK(ibv_query_qp(e.qp, &qa, IBV_QP_STATE, &ia) == 0 && qa.qp_state == IBV_QPS_RTS,
	      "the QP left RTS while retrying: state %d", qa.qp_state);
	/* Then the retries are spent. */
	wc = tv_wait(&e);
	CHECK(wc.wr_id == 5 && wc.status == IBV_WC_RETRY_EXC_ERR, "then: wr %llu status %d, want retries exceeded",
	      (unsigned long long)wc.wr_id, wc.status);
	tv_say(sock, 'x');
	tv_join(pid);
	return t_shim_finish();
}
