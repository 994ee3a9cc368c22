/* SPDX-License-Identifier: MIT */
/* Description: UD queue pairs on the virtual verbs device, two processes: datagrams of 0 B to the MTU from two sender QPs arrive intact after the 40 bytes a GRH takes, each sender's in order, with the right source QPN and LID, immediate data, and a GRH (the sender's GID) only when the address handle had one; a datagram with the wrong Q_Key is dropped; a receiver asleep in ibv_get_cq_event is woken by the first datagram of a new sender; a reply to an address handle made from the receive completion arrives; larger than the MTU completes with a length error; to a receiver that is gone, or a QPN nobody has, it completes and is lost; a UD QP refuses RDMA WRITE */
/* Channels: shm host-tcp */
#include "verbstest.h"

#define MTU	4096
#define GRH	40
#define NRECV	8

static const uint32_t sizes[] = { 0, 1, 100, MTU };
#define N (sizeof(sizes) / sizeof(sizes[0]))

/* The receiver: a completion channel, receives posted, then every datagram checked. */
static int receiver(int sock)
{
	struct ibv_comp_channel *ch;
	struct tv_end e;
	struct tv_name me, peer[2];
	uint8_t *buf = calloc(NRECV, GRH + MTU);
	union ibv_gid gid;
	struct ibv_mr *mr;
	struct ibv_ah *back;
	struct ibv_wc wc, last = { 0 };

	tv_device(&e, &ch);
	tv_ud_qp(&e);
	mr = ibv_reg_mr(e.pd, buf, NRECV * (GRH + MTU), IBV_ACCESS_LOCAL_WRITE);
	TV_MUST(buf && mr, "register the receive buffers: %s", strerror(errno));
	TV_MUST(ibv_query_gid(e.ctx, 1, 0, &gid) == 0, "query GID 0");
	for (uint64_t i = 0; i < NRECV; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf + i * (GRH + MTU), .length = GRH + MTU,
				       .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;

		TV_MUST(ibv_post_recv(e.qp, &wr, &bad) == 0, "post receive %llu", (unsigned long long)i);
	}
	TV_MUST(ibv_req_notify_cq(e.cq, 0) == 0, "arm the CQ");
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	peer[0] = tv_trade(sock, &me);
	peer[1] = tv_trade(sock, &me);
	/* Asleep before the first datagram: the new sender's lane must wake us. */
	tv_event(&e, ch, "the first datagram");
	ibv_ack_cq_events(e.cq, 1);
	for (uint32_t n = 0, next[2] = { 0, N }; n < 2 * N; n++) {
		uint32_t seed, i, len;
		const uint8_t *at;
		int global;

		wc = tv_wait(&e);
		/* Each sender's datagrams in its order; the two senders' interleave as they like. */
		seed = ntohl(wc.imm_data);
		i = seed - 100;
		TV_MUST(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV &&
			(wc.wc_flags & IBV_WC_WITH_IMM) && i < 2 * N && i == next[i / N]++,
			"datagram %u: status %d op %d flags %#x (the wrong Q_Key's is 999)", seed, wc.status,
			wc.opcode, wc.wc_flags);
		len = sizes[i % N];
		global = i % 2;
		at = buf + wc.wr_id * (GRH + MTU);
		CHECK(wc.wr_id == n && wc.byte_len == GRH + len && wc.src_qp == peer[i / N].qpn &&
		      wc.slid == 0x102 && !!(wc.wc_flags & IBV_WC_GRH) == global,
		      "datagram %u: wr_id %llu len %u src_qp %#x (want %#x) slid %#x flags %#x",
		      seed, (unsigned long long)wc.wr_id, wc.byte_len, wc.src_qp, peer[i / N].qpn,
		      wc.slid, wc.wc_flags);
		if (i == 2 * N - 1)
			last = wc;
		if (global)
			CHECK(memcmp(at + 8, gid.raw, 16) == 0 && memcmp(at + 24, gid.raw, 16) == 0,
			      "datagram %u: the GRH names other GIDs", seed);
		for (uint32_t k = 0; k < len; k++)
			if (at[GRH + k] != tv_pattern(seed, k)) {
				CHECK(0, "datagram %u: byte %u wrong", seed, k);
				break;
			}
	}
	/* The wrong Q_Key's datagram was dropped, not held back: nothing more came. */
	CHECK(ibv_poll_cq(e.cq, 1, &wc) == 0, "a completion past the last datagram");
	/* A reply, to the address the second sender's last datagram (with a GRH) names. */
	back = ibv_create_ah_from_wc(e.pd, &last, (struct ibv_grh *)(buf + last.wr_id * (GRH + MTU)), 1);
	TV_MUST(back, "an address handle from the receive: %s", strerror(errno));
	CHECK(tv_send_dgram(&e, e.qp, mr, back, last.src_qp, TV_QKEY, 33, 7) == IBV_WC_SUCCESS, "the reply");
	tv_hear(sock, 'r');
	ibv_destroy_ah(back);
	return 0;
}

int main(int argc, char **argv)
{
	struct tv_end e, e2;
	struct tv_name me, me2, peer;
	uint8_t *buf = malloc(2 * MTU);
	struct ibv_ah *ah[2];
	struct ibv_mr *mr, *mr2;
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(receiver, &sock);
	tv_device(&e, NULL);
	tv_ud_qp(&e);
	e2 = e;	/* a second sender QP of the same process, on its own CQ */
	e2.cq = ibv_create_cq(e.ctx, 64, NULL, NULL, 0);
	TV_MUST(e2.cq, "a second CQ");
	tv_ud_qp(&e2);
	mr = ibv_reg_mr(e.pd, buf, 2 * MTU, IBV_ACCESS_LOCAL_WRITE);
	mr2 = ibv_reg_mr(e.pd, buf + MTU, MTU, IBV_ACCESS_LOCAL_WRITE);
	TV_MUST(buf && mr && mr2, "register the send buffer: %s", strerror(errno));
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	me2 = (struct tv_name){ .qpn = e2.qp->qp_num, .lid = 0x102 };
	peer = tv_trade(sock, &me);
	tv_trade(sock, &me2);
	ah[0] = tv_ah(&e, 0);
	ah[1] = tv_ah(&e, 1);
	for (uint32_t i = 0; i < 2 * N; i++) {
		struct tv_end *s = i < N ? &e : &e2;

		if (i == N)	/* the wrong Q_Key: the receiver must drop it */
			CHECK(tv_send_dgram(s, s->qp, mr2, ah[0], peer.qpn, TV_QKEY + 1, 10, 999) ==
			      IBV_WC_SUCCESS, "the datagram with the wrong Q_Key");
		CHECK(tv_send_dgram(s, s->qp, i < N ? mr : mr2, ah[i % 2], peer.qpn, TV_QKEY, sizes[i % N],
				 100 + i) == IBV_WC_SUCCESS, "datagram %u", 100 + i);
	}
	/* The receiver's reply to e2's QP, through the address handle it made from our datagram. */
	{
		struct ibv_sge sge = { .addr = (uintptr_t)buf + MTU, .length = MTU, .lkey = mr2->lkey };
		struct ibv_recv_wr wr = { .wr_id = 77, .sg_list = &sge, .num_sge = 1 }, *bad;
		struct ibv_wc wc;

		TV_MUST(ibv_post_recv(e2.qp, &wr, &bad) == 0, "post the reply's receive");
		wc = tv_wait(&e2);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 77 && wc.byte_len == GRH + 33 &&
		      wc.src_qp == peer.qpn, "the reply: status %d wr_id %llu len %u src_qp %#x",
		      wc.status, (unsigned long long)wc.wr_id, wc.byte_len, wc.src_qp);
		for (uint32_t k = 0; k < 33; k++)
			if (buf[MTU + GRH + k] != tv_pattern(7, k)) {
				CHECK(0, "the reply: byte %u wrong", k);
				break;
			}
	}
	tv_say(sock, 'r');
	tv_join(pid);
	/* To the receiver, gone: its lane is dead; completes, and is lost. */
	CHECK(tv_send_dgram(&e, e.qp, mr, ah[0], peer.qpn, TV_QKEY, 10, 4) == IBV_WC_SUCCESS,
	      "a datagram to a receiver that is gone");
	/* To a QPN nobody has: completes, and is lost. */
	CHECK(tv_send_dgram(&e, e.qp, mr, ah[0], 0xfffff0, TV_QKEY, 10, 5) == IBV_WC_SUCCESS,
	      "a datagram to nobody");
	/* Larger than the MTU: a local length error, as a NIC reports it. */
	CHECK(tv_send_dgram(&e, e.qp, mr, ah[0], peer.qpn, TV_QKEY, MTU + 1, 6) == IBV_WC_LOC_LEN_ERR,
	      "a datagram larger than the MTU");
	{
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
		struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE },
				   *bad = NULL;

		CHECK(ibv_post_send(e2.qp, &wr, &bad) == EINVAL && bad == &wr,
		      "a UD QP took an RDMA WRITE");
	}
	return t_shim_finish();
}
