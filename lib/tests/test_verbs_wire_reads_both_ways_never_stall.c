/* SPDX-License-Identifier: MIT */
/* Description: across hosts two ends that each post 200 READs of 256 KiB to the other at once all complete: an initiator keeps at most its QP's max_rd_atomic READs out, so a target never holds more answers than it writes and never stops reading the stream that carries its own answers (both ends stopped, none completed, half the runs) */
/* Channels: host-tcp */
#include "verbstest.h"

#define LEN (256u << 10)
#define N 200

static int both(int sock)
{
	struct tv_end e;
	struct tv_name me, peer;
	struct ibv_mr *mr, *dst;
	int ok = 0;

	tv_open_deep(&e, N, 1);
	mr = tv_region(&e, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	dst = tv_region(&e, LEN, IBV_ACCESS_LOCAL_WRITE);
	for (uint32_t k = 0; k < LEN; k++)
		((uint8_t *)mr->addr)[k] = tv_pattern(9, k);
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102, .rkey = mr->rkey, .addr = (uintptr_t)mr->addr };
	peer = tv_trade(sock, &me);
	tv_connect_rnr(&e, &peer, 12, 7);
	{
		struct ibv_qp_attr a = { .max_rd_atomic = 4 };

		TV_MUST(ibv_modify_qp(e.qp, &a, IBV_QP_MAX_QP_RD_ATOMIC) == 0, "max_rd_atomic 4");
	}
	for (int i = 0; i < N; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)dst->addr, .length = LEN, .lkey = dst->lkey };
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
					  .send_flags = IBV_SEND_SIGNALED,
					  .wr.rdma = { .remote_addr = peer.addr, .rkey = peer.rkey } }, *bad;

		TV_MUST(ibv_post_send(e.qp, &wr, &bad) == 0, "post READ %d: %s", i, strerror(errno));
	}
	for (int i = 0; i < N; i++) {
		struct ibv_wc wc = tv_wait(&e);

		ok += wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)i;
	}
	CHECK(ok == N, "%d of %d READs completed in order", ok, N);
	tv_intact(dst->addr, 9, LEN, "the last READ's bytes");
	return 0;
}

static int child(int sock)
{
	both(sock);
	tv_hear(sock, 'k');
	return 0;
}

int main(int argc, char **argv)
{
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(child, &sock);
	both(sock);
	tv_say(sock, 'k');
	tv_join(pid);
	return t_exit_code();
}
