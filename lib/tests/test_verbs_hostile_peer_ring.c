/* SPDX-License-Identifier: MIT */
/* Description: a hostile peer writing its own records into the victim's ring (a WRITE with immediate that claims to be only the first piece, then a SEND piece) cannot make the victim's provider write into a receive buffer no MR allows (it crashed on SIGSEGV): a WRITE with immediate is one whole record, every piece of a message has its first piece's op, and the QP goes to error */
#include "verbstest.h"

static int victim(int sock)
{
	struct tv_end e;
	struct tv_name me, peer;
	static uint8_t good[64];
	struct ibv_mr *m;
	struct ibv_sge s1, s2;
	struct ibv_recv_wr r1 = { .wr_id = 1, .sg_list = &s1, .num_sge = 1 },
			   r2 = { .wr_id = 2, .sg_list = &s2, .num_sge = 1 }, *bad;
	struct ibv_wc wc;
	char c;

	tv_open(&e);
	m = ibv_reg_mr(e.pd, good, sizeof(good), IBV_ACCESS_LOCAL_WRITE);
	TV_MUST(m, "reg");
	s1 = (struct ibv_sge){ .addr = (uintptr_t)good, .length = 64, .lkey = m->lkey };
	/* A receive whose buffer no MR covers: a NIC completes it with LOC_PROT_ERR. */
	s2 = (struct ibv_sge){ .addr = 0x10, .length = 64, .lkey = m->lkey ^ 1 };
	TV_MUST(ibv_post_recv(e.qp, &r1, &bad) == 0 && ibv_post_recv(e.qp, &r2, &bad) == 0, "post recvs");
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	TV_MUST(read(sock, &c, 1) == 1, "wait for the attacker");
	wc = tv_wait(&e);
	CHECK(wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS, "first recv: %d %d", (int)wc.wr_id, wc.status);
	wc = tv_wait(&e);	/* it crashed here */
	CHECK(wc.wr_id == 2 && wc.status != IBV_WC_SUCCESS, "second recv: %d %d", (int)wc.wr_id, wc.status);
	return 0;
}

int main(int argc, char **argv)
{
	struct tv_end e;
	struct tv_name me, peer;
	char msg[16] = "hello";
	struct ibv_sge s = { .addr = (uintptr_t)msg, .length = 16 };
	struct ibv_send_wr wr = { .wr_id = 7, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED }, *bad;
	struct ibv_wc wc;
	uint8_t *mem, *ring;
	uint64_t prod;
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(victim, &sock);
	tv_open(&e);
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	TV_MUST(ibv_post_send(e.qp, &wr, &bad) == 0, "send");
	wc = tv_wait(&e);
	TV_MUST(wc.status == IBV_WC_SUCCESS, "send status %d", wc.status);
	mem = tv_written_ring();
	TV_MUST(mem, "find the victim's ring");
	ring = mem + FF_VQP_HDR_SIZE;
	prod = *(uint64_t *)(mem + FF_VQP_OFF_PROD);
	tv_rec(ring + prod, 0, FF_VQP_OP_WRITE_IMM, FF_VQP_FIRST, 0);
	tv_rec(ring + prod + 16, 16, FF_VQP_OP_SEND, FF_VQP_LAST, 16);
	memset(ring + prod + 32, 0x41, 16);
	__atomic_store_n((uint64_t *)(mem + FF_VQP_OFF_PROD), prod + 48, __ATOMIC_RELEASE);
	CHECK(write(sock, "g", 1) == 1, "go");
	tv_join(pid);
	return t_shim_finish();
}
