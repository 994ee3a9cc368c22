/* SPDX-License-Identifier: MIT */
/* Description: ibv_resize_cq keeps the completions a CQ holds, in order, and refuses a size smaller than what it holds, as a NIC does; completions made after a resize fill the new size */
#include "verbstest.h"

#define N 6

int main(int argc, char **argv)
{
	struct tv_end e;
	static uint8_t buf[N][40 + 64];
	struct ibv_ah *ah;
	struct ibv_mr *mr;
	struct ibv_wc wc[2 * N];
	int got = 0, n;

	(void)argc;
	tv_setup(argv);
	tv_device(&e, NULL);
	TV_MUST(ibv_resize_cq(e.cq, 2 * N) == 0, "resize an empty CQ to %d", 2 * N);
	tv_ud_qp(&e);
	mr = ibv_reg_mr(e.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	TV_MUST(mr, "register: %s", strerror(errno));
	ah = tv_ah(&e, 0);
	for (uint64_t i = 0; i < N; i++) {
		struct ibv_sge r = { .addr = (uintptr_t)buf[i], .length = sizeof(buf[i]), .lkey = mr->lkey };
		struct ibv_sge s = { .addr = (uintptr_t)buf[i] + 40, .length = 64, .lkey = mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = 100 + i, .sg_list = &r, .num_sge = 1 }, *rbad;
		/* A datagram to our own QP: a send completion now, a receive one when polled. */
		struct ibv_send_wr sw = { .wr_id = i, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED,
					  .wr.ud = { .ah = ah, .remote_qpn = e.qp->qp_num,
						     .remote_qkey = TV_QKEY } }, *sbad;

		TV_MUST(ibv_post_recv(e.qp, &rw, &rbad) == 0 && ibv_post_send(e.qp, &sw, &sbad) == 0,
			"post %llu", (unsigned long long)i);
	}
	CHECK(ibv_resize_cq(e.cq, N - 1) == EINVAL, "resized to fewer entries than the %d it holds", N);
	CHECK(ibv_resize_cq(e.cq, 4 * N) == 0 && e.cq->cqe >= 4 * N, "resize to %d: cqe %d", 4 * N, e.cq->cqe);
	while (got < 2 * N && (n = ibv_poll_cq(e.cq, 2 * N - got, wc + got)) > 0)
		got += n;
	CHECK(got == 2 * N, "%d completions, want %d", got, 2 * N);
	for (int i = 0; i < got; i++)
		CHECK(wc[i].status == IBV_WC_SUCCESS && wc[i].wr_id == (uint64_t)(i < N ? i : 100 + i - N),
		      "completion %d: status %d wr_id %llu", i, wc[i].status, (unsigned long long)wc[i].wr_id);
	return t_shim_finish();
}
