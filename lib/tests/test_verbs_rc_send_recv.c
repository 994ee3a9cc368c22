/* SPDX-License-Identifier: MIT */
/* Description: two processes on the virtual verbs device: SENDs of 1 B to 3 MiB (past the 1 MiB ring, so in pieces) arrive intact and in order in posted receives of the other process, with their immediate data, both ways; unsignaled sends make no completion; a SEND posted before the peer posts its receive waits for it (RNR, retried) */
/* Channels: shm host-tcp */
#include "verbstest.h"

static const uint32_t sizes[] = { 1, 100, 4096, 200000, 3 << 20, 17 };
#define N (sizeof(sizes) / sizeof(sizes[0]))
#define BIG (3u << 20)

/* Receive every size in order, check the bytes, then send them all back. */
static int echo(int sock)
{
	struct tv_end e;
	struct tv_name me, peer;
	uint8_t *buf = malloc(BIG);
	struct ibv_mr *mr;

	tv_open(&e);
	mr = ibv_reg_mr(e.pd, buf, BIG, IBV_ACCESS_LOCAL_WRITE);
	CHECK(buf && mr, "register the receive buffer: %s", strerror(errno));
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	/* The sender's first SEND is posted before this receive: it must wait, not fail. */
	CHECK(read(sock, &me, 1) == 1, "wait for the first send");
	for (size_t i = 0; i < N; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = BIG, .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 100 + i, .sg_list = &sge, .num_sge = 1 }, *bad;
		struct ibv_wc wc;

		memset(buf, 0, sizes[i]);
		CHECK(ibv_post_recv(e.qp, &wr, &bad) == 0, "post receive %zu", i);
		wc = tv_wait(&e);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.wr_id == 100 + i &&
		      wc.byte_len == sizes[i] && wc.qp_num == e.qp->qp_num && wc.src_qp == peer.qpn,
		      "receive %zu: status %d opcode %d wr_id %llu len %u (want %u)", i, wc.status,
		      wc.opcode, (unsigned long long)wc.wr_id, wc.byte_len, sizes[i]);
		CHECK((wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == 0xabc0 + i,
		      "receive %zu: immediate data %#x", i, ntohl(wc.imm_data));
		for (uint32_t k = 0; k < sizes[i]; k++)
			if (buf[k] != tv_pattern(i, k)) {
				CHECK(0, "receive %zu: byte %u is %#x, want %#x", i, k, buf[k], tv_pattern(i, k));
				break;
			}
	}
	CHECK(write(sock, "r", 1) == 1, "say received");
	return 0;
}

int main(int argc, char **argv)
{
	struct tv_end e;
	struct tv_name me, peer;
	/* Each send its own bytes: an unsignaled send's buffer is not ours to reuse. */
	uint8_t *buf = malloc(2 * BIG), *at = buf;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	int sock, signaled = 0;
	pid_t pid;
	char c;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(echo, &sock);
	tv_open(&e);
	mr = ibv_reg_mr(e.pd, buf, 2 * BIG, 0);
	CHECK(buf && mr, "register the send buffer: %s", strerror(errno));
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	for (size_t i = 0; i < N; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)at, .length = sizes[i], .lkey = mr->lkey };
		/* Every other send unsignaled: it must make no completion. */
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND_WITH_IMM, .imm_data = htonl(0xabc0 + i),
					  .send_flags = i % 2 ? 0 : IBV_SEND_SIGNALED }, *bad;

		for (uint32_t k = 0; k < sizes[i]; k++)
			at[k] = tv_pattern(i, k);
		at += sizes[i];
		CHECK(ibv_post_send(e.qp, &wr, &bad) == 0, "post send %zu: %s", i, strerror(errno));
		if (i == 0)
			CHECK(write(sock, "s", 1) == 1, "say sent");
		if (i % 2 == 0) {
			wc = tv_wait(&e);
			CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND && wc.wr_id == i,
			      "send %zu: status %d opcode %d wr_id %llu", i, wc.status, wc.opcode,
			      (unsigned long long)wc.wr_id);
			signaled++;
		}
	}
	/* The last send is unsignaled: polling moves it along until the peer has it all. */
	while (recv(sock, &c, 1, MSG_DONTWAIT) != 1)
		CHECK(ibv_poll_cq(e.cq, 1, &wc) == 0, "an unsignaled send made a completion");
	CHECK(c == 'r', "the peer received everything");
	tv_join(pid);
	CHECK(signaled == (int)(N + 1) / 2, "%d signaled completions", signaled);
	return t_shim_finish();
}
