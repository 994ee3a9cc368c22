/* SPDX-License-Identifier: MIT */
/* Description: ibv_dereg_mr revokes the rkey for a peer that already used it, as a NIC does: its next WRITE with that rkey completes with a remote access error (it completed, into memory nobody reads), and the target's buffer keeps what it had; the same buffer registered again gets a new rkey that works, and the target's other regions keep working through the same QP */
#include "verbstest.h"

#define LEN 4096

struct names {
	struct tv_name qp;
	uint32_t rkey[2];
	uint64_t addr[2];
};

static int target(int sock)
{
	struct tv_end e;
	struct names me = { 0 }, peer;
	uint8_t *buf[2] = { malloc(LEN), malloc(LEN) };
	struct ibv_mr *mr[2], *again;
	uint32_t rkey;

	tv_open(&e);
	for (int i = 0; i < 2; i++) {
		memset(buf[i], 0, LEN);
		mr[i] = ibv_reg_mr(e.pd, buf[i], LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		TV_MUST(mr[i], "register: %s", strerror(errno));
		me.rkey[i] = mr[i]->rkey;
		me.addr[i] = (uintptr_t)buf[i];
	}
	me.qp = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	TV_MUST(write(sock, &me, sizeof(me)) == sizeof(me) && read(sock, &peer, sizeof(peer)) == sizeof(peer),
		"trade names");
	tv_connect(&e, &peer.qp);
	tv_hear(sock, 'w');	/* the peer wrote both regions */
	CHECK(buf[0][0] == 0x11 && buf[1][0] == 0x11, "the first WRITEs: %#x %#x", buf[0][0], buf[1][0]);
	TV_MUST(ibv_dereg_mr(mr[0]) == 0, "dereg");
	again = ibv_reg_mr(e.pd, buf[0], LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	TV_MUST(again, "register again: %s", strerror(errno));
	rkey = again->rkey;
	TV_MUST(write(sock, &rkey, 4) == 4, "the new rkey");
	tv_hear(sock, 'x');	/* the peer wrote again, then tried the old rkey */
	CHECK(buf[0][0] == 0x33 && buf[1][0] == 0x22, "after registering again: %#x %#x, want 0x33 0x22",
	      buf[0][0], buf[1][0]);
	return 0;
}

/* A signaled WRITE of one byte b to (rkey, addr) through e's QP; its completion's status. */
static enum ibv_wc_status write_byte(struct tv_end *e, struct ibv_mr *mr, uint8_t b, uint32_t rkey,
				     uint64_t addr)
{
	struct ibv_sge sge = { .addr = (uintptr_t)mr->addr, .length = 1, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = b, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				  .send_flags = IBV_SEND_SIGNALED,
				  .wr.rdma = { .remote_addr = addr, .rkey = rkey } }, *bad;
	struct ibv_wc wc;

	*(uint8_t *)mr->addr = b;
	TV_MUST(ibv_post_send(e->qp, &wr, &bad) == 0, "post a WRITE: %s", strerror(errno));
	wc = tv_wait(e);
	CHECK(wc.wr_id == b, "the WRITE's completion: wr_id %llu", (unsigned long long)wc.wr_id);
	return wc.status;
}

int main(int argc, char **argv)
{
	struct tv_end e;
	struct names me = { 0 }, peer;
	uint8_t *buf = malloc(LEN);
	enum ibv_wc_status st;
	struct ibv_mr *mr;
	uint32_t rkey;
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(target, &sock);
	tv_open(&e);
	mr = ibv_reg_mr(e.pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE);
	TV_MUST(mr, "register: %s", strerror(errno));
	me.qp = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	TV_MUST(read(sock, &peer, sizeof(peer)) == sizeof(peer) && write(sock, &me, sizeof(me)) == sizeof(me),
		"trade names");
	tv_connect(&e, &peer.qp);
	for (int i = 0; i < 2; i++)
		CHECK(write_byte(&e, mr, 0x11, peer.rkey[i], peer.addr[i]) == IBV_WC_SUCCESS, "WRITE %d", i);
	tv_say(sock, 'w');
	TV_MUST(read(sock, &rkey, 4) == 4, "the new rkey");
	CHECK(rkey != peer.rkey[0], "registering again gave the same rkey %#x", rkey);
	CHECK(write_byte(&e, mr, 0x22, peer.rkey[1], peer.addr[1]) == IBV_WC_SUCCESS,
	      "a WRITE to the region not deregistered");
	CHECK(write_byte(&e, mr, 0x33, rkey, peer.addr[0]) == IBV_WC_SUCCESS, "a WRITE with the new rkey");
	st = write_byte(&e, mr, 0x99, peer.rkey[0], peer.addr[0]);
	CHECK(st == IBV_WC_REM_ACCESS_ERR, "a WRITE with a deregistered rkey: status %d (%s), want a remote access error",
	      st, ibv_wc_status_str(st));
	tv_say(sock, 'x');
	tv_join(pid);
	return t_shim_finish();
}
