/* SPDX-License-Identifier: MIT */
/* Description: an RDMA WRITE or READ of zero bytes, with an rkey nobody gave and address 0, completes successfully and leaves the QP in RTS (IB spec: a zero-length request's R_Key is not checked; UCX probes its peers with one, and took our remote access error for a dead peer); a SEND after them still arrives */
/* Channels: shm host-tcp */
#include "verbstest.h"

static int peer(int sock)
{
	struct tv_end e;
	struct ibv_mr *mr;
	struct ibv_wc wc;

	tv_open(&e);
	mr = tv_region(&e, 64, IBV_ACCESS_LOCAL_WRITE);
	tv_post_recv(&e, mr, 7);
	tv_link(sock, &e);
	wc = tv_wait(&e);
	CHECK(wc.wr_id == 7 && wc.status == IBV_WC_SUCCESS && !strcmp(mr->addr, "after"),
	      "the SEND after the zero-length requests: wr %llu status %d", (unsigned long long)wc.wr_id, wc.status);
	tv_say(sock, 'k');
	return 0;
}

int main(int argc, char **argv)
{
	struct tv_end e;
	struct ibv_mr *mr;
	struct ibv_sge sge;
	struct ibv_send_wr w[3], *bad;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr ia;
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(peer, &sock);
	tv_open(&e);
	mr = tv_region(&e, 64, IBV_ACCESS_LOCAL_WRITE);
	strcpy(mr->addr, "after");
	tv_link(sock, &e);
	sge = (struct ibv_sge){ .addr = (uintptr_t)mr->addr, .length = 6, .lkey = mr->lkey };
	w[0] = (struct ibv_send_wr){ .wr_id = 1, .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
				     .wr.rdma = { .remote_addr = 0, .rkey = 0x12345 }, .next = &w[1] };
	w[1] = (struct ibv_send_wr){ .wr_id = 2, .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED,
				     .wr.rdma = { .remote_addr = 0, .rkey = 0x12345 }, .next = &w[2] };
	w[2] = (struct ibv_send_wr){ .wr_id = 3, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED,
				     .sg_list = &sge, .num_sge = 1 };
	TV_MUST(ibv_post_send(e.qp, w, &bad) == 0, "post");
	for (uint64_t id = 1; id <= 3; id++) {
		struct ibv_wc wc = tv_wait(&e);

		CHECK(wc.wr_id == id && wc.status == IBV_WC_SUCCESS, "request %llu: wr %llu status %d (%s)",
		      (unsigned long long)id, (unsigned long long)wc.wr_id, wc.status, ibv_wc_status_str(wc.status));
	}
	CHECK(ibv_query_qp(e.qp, &qa, IBV_QP_STATE, &ia) == 0 && qa.qp_state == IBV_QPS_RTS,
	      "the QP after zero-length requests: state %d, want RTS", qa.qp_state);
	tv_hear(sock, 'k');
	tv_join(pid);
	return t_exit_code();
}
