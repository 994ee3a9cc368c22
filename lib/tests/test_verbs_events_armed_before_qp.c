/* SPDX-License-Identifier: MIT */
/* Description: a CQ armed (ibv_req_notify_cq) before the QP that receives into it exists: that QP's peer still rings, and the receiver asleep in ibv_get_cq_event wakes with the SEND's completion */
#include "verbstest.h"

static int sender(int sock)
{
	struct tv_end e;
	struct tv_name me, peer;
	char *msg = malloc(64);
	struct ibv_mr *mr;
	struct ibv_sge sge;
	struct ibv_send_wr wr = { .wr_id = 1, .num_sge = 1, .opcode = IBV_WR_SEND, .sg_list = &sge,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	char c;

	tv_open(&e);
	mr = ibv_reg_mr(e.pd, msg, 64, 0);
	TV_MUST(msg && mr, "register");
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	strcpy(msg, "armed early");
	sge = (struct ibv_sge){ .addr = (uintptr_t)msg, .length = 12, .lkey = mr->lkey };
	TV_MUST(read(sock, &c, 1) == 1, "wait for the receiver");
	TV_MUST(ibv_post_send(e.qp, &wr, &bad) == 0, "send");
	CHECK(tv_wait(&e).status == IBV_WC_SUCCESS, "the send completed");
	TV_MUST(read(sock, &c, 1) == 1, "wait for the end");
	return 0;
}

int main(int argc, char **argv)
{
	struct ibv_comp_channel *ch;
	struct tv_end e;
	struct tv_name me, peer;
	char *buf = malloc(64);
	struct ibv_mr *mr;
	struct ibv_sge sge;
	struct ibv_recv_wr rwr = { .wr_id = 7, .sg_list = &sge, .num_sge = 1 }, *rbad;
	struct ibv_wc wc;
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(sender, &sock);
	tv_device(&e, &ch);
	TV_MUST(ibv_req_notify_cq(e.cq, 0) == 0, "arm before the QP exists");
	tv_qp(&e);
	mr = ibv_reg_mr(e.pd, buf, 64, IBV_ACCESS_LOCAL_WRITE);
	TV_MUST(buf && mr, "register");
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	sge = (struct ibv_sge){ .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	TV_MUST(ibv_post_recv(e.qp, &rwr, &rbad) == 0, "post a receive");
	TV_MUST(write(sock, "g", 1) == 1, "let the sender go");
	tv_event(&e, ch, "armed before the QP existed");
	wc = tv_wait(&e);
	CHECK(wc.wr_id == 7 && wc.status == IBV_WC_SUCCESS && wc.byte_len == 12 && !strcmp(buf, "armed early"),
	      "the receive: wr %llu status %d len %u", (unsigned long long)wc.wr_id, wc.status, wc.byte_len);
	ibv_ack_cq_events(e.cq, 1);
	TV_MUST(write(sock, "x", 1) == 1, "the end");
	tv_join(pid);
	return t_shim_finish();
}
