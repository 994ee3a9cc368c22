/* SPDX-License-Identifier: MIT */
/* Description: when the process at the other end of an RC QP dies (its agent session ends, the agent marks its QPs dead), a SEND to it completes with an error instead of hanging, what it had sent before dying is still delivered, the other posted receives are flushed and later requests too */
/* Channels: shm host-tcp */
#include "verbstest.h"

static int dies(int sock)
{
	struct tv_end e;
	struct tv_name me, peer;
	char *msg = malloc(64);
	struct ibv_mr *mr;
	struct ibv_sge sge;
	struct ibv_send_wr wr = { .wr_id = 1, .num_sge = 1, .opcode = IBV_WR_SEND, .sg_list = &sge }, *bad;
	char c;

	tv_open(&e);
	mr = ibv_reg_mr(e.pd, msg, 64, IBV_ACCESS_REMOTE_READ);
	TV_MUST(mr, "register");
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102, .rkey = mr->rkey, .addr = (uintptr_t)msg };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	strcpy(msg, "last words");
	sge = (struct ibv_sge){ .addr = (uintptr_t)msg, .length = 11, .lkey = mr->lkey };
	wr.send_flags = IBV_SEND_SIGNALED;
	TV_MUST(ibv_post_send(e.qp, &wr, &bad) == 0, "send the last words");
	/* Sent, not only posted: a process that exits with a send in flight may lose it, on a NIC too. */
	TV_MUST(tv_wait(&e).status == IBV_WC_SUCCESS, "the last words went");
	TV_MUST(read(sock, &c, 1) == 1, "wait");
	_exit(0);	/* no destroy, no close: the process is just gone */
}

int main(int argc, char **argv)
{
	struct tv_end e;
	struct tv_name me, peer;
	char *buf = malloc(64);
	struct ibv_mr *mr;
	struct ibv_sge sge;
	struct ibv_recv_wr r1 = { .wr_id = 10, .sg_list = &sge, .num_sge = 1 }, r2 = r1, *rbad;
	struct ibv_send_wr wr = { .wr_id = 20, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *sbad;
	struct ibv_wc wc;
	int sock, st, got_last = 0;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(dies, &sock);
	tv_open(&e);
	mr = ibv_reg_mr(e.pd, buf, 64, IBV_ACCESS_LOCAL_WRITE);
	TV_MUST(mr, "register");
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	sge = (struct ibv_sge){ .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	r2.wr_id = 11;
	TV_MUST(ibv_post_recv(e.qp, &r1, &rbad) == 0 && ibv_post_recv(e.qp, &r2, &rbad) == 0, "post receives");
	TV_MUST(write(sock, "x", 1) == 1 && waitpid(pid, &st, 0) == pid, "let the peer die");
	/*
	 * The agent marks its QP dead when its session ends: a send fails once
	 * it has. Meanwhile what the peer sent before dying comes in.
	 */
	for (int failed = 0; !failed;) {
		CHECK(ibv_post_send(e.qp, &wr, &sbad) == 0, "post a send to the dead peer");
		for (;;) {
			wc = tv_wait(&e);
			if (wc.wr_id == 10) {
				CHECK(wc.status == IBV_WC_SUCCESS && wc.byte_len == 11 && !strcmp(buf, "last words"),
				      "what it sent before dying: status %d len %u", wc.status, wc.byte_len);
				got_last = 1;
				continue;
			}
			TV_MUST(wc.wr_id == 20, "wr %llu, status %d", (unsigned long long)wc.wr_id, wc.status);
			failed = wc.status != IBV_WC_SUCCESS;
			break;
		}
	}
	CHECK(wc.status == IBV_WC_RETRY_EXC_ERR, "a send to the dead peer: status %d, want retries exceeded", wc.status);
	if (!got_last) {
		wc = tv_wait(&e);
		CHECK(wc.wr_id == 10 && wc.status == IBV_WC_SUCCESS && wc.byte_len == 11 && !strcmp(buf, "last words"),
		      "what it sent before dying: wr %llu status %d len %u", (unsigned long long)wc.wr_id, wc.status, wc.byte_len);
	}
	wc = tv_wait(&e);
	CHECK(wc.wr_id == 11 && wc.status == IBV_WC_WR_FLUSH_ERR, "the other receive: wr %llu status %d, want flushed",
	      (unsigned long long)wc.wr_id, wc.status);
	CHECK(ibv_post_send(e.qp, &wr, &sbad) == 0, "post after the death");
	wc = tv_wait(&e);
	CHECK(wc.wr_id == 20 && wc.status == IBV_WC_WR_FLUSH_ERR, "a send after the death: status %d, want flushed",
	      wc.status);
	return t_shim_finish();
}
