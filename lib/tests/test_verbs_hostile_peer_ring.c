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

static uint8_t *peer_ring(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	uint8_t *found = NULL;

	while (f && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (!strstr(line, "ffv-qp") || sscanf(line, "%lx-%lx", &lo, &hi) != 2)
			continue;
		if (*(uint64_t *)(lo + FF_VQP_OFF_PROD) != 0)
			found = (uint8_t *)lo;
	}
	if (f)
		fclose(f);
	return found;
}

static void rec(uint8_t *at, uint32_t len, uint8_t op, uint8_t flags, uint32_t total)
{
	memset(at, 0, 16);
	memcpy(at, &len, 4);
	at[4] = op;
	at[5] = flags;
	memcpy(at + 12, &total, 4);
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
	mem = peer_ring();
	TV_MUST(mem, "find the victim's ring");
	ring = mem + FF_VQP_HDR_SIZE;
	prod = *(uint64_t *)(mem + FF_VQP_OFF_PROD);
	rec(ring + prod, 0, FF_VQP_OP_WRITE_IMM, FF_VQP_FIRST, 0);
	rec(ring + prod + 16, 16, FF_VQP_OP_SEND, FF_VQP_LAST, 16);
	memset(ring + prod + 32, 0x41, 16);
	__atomic_store_n((uint64_t *)(mem + FF_VQP_OFF_PROD), prod + 48, __ATOMIC_RELEASE);
	CHECK(write(sock, "g", 1) == 1, "go");
	tv_join(pid);
	return t_shim_finish();
}
