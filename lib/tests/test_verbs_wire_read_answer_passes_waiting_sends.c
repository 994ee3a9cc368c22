/* SPDX-License-Identifier: MIT */
/* Description: across hosts, a READ's answer is not stuck behind SENDs that wait for receives: one end posts 8 SENDs of 1 MiB to a peer that has posted no receive and then makes no verbs call; the peer READs from it first and posts its receives only once the READ completed, as a NIC allows (its answers pass an RNR-stalled SEND); then all 8 arrive intact and complete (before, the READ's answer sat behind the SENDs' bytes on the connection and both ends waited for ever) */
/* Channels: shm host-tcp */
#include "verbstest.h"

#define MSG	(1u << 20)
#define NMSG	8

static int sender(int sock)
{
	struct tv_end e;
	struct tv_name me, peer;
	struct ibv_mr *mr;
	struct ibv_wc wc;

	tv_open(&e);
	mr = tv_region(&e, NMSG * MSG, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102, .rkey = mr->rkey, .addr = (uintptr_t)mr->addr };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	for (uint32_t i = 0; i < NMSG; i++)
		tv_send(&e, mr, (uint8_t *)mr->addr + i * MSG, MSG, i);
	tv_say(sock, 'g');
	tv_hear(sock, 'k');	/* no verbs call meanwhile: a NIC answers READs on its own */
	for (uint32_t i = 0; i < NMSG; i++) {
		wc = tv_wait(&e);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == i, "SEND %u: wr %llu status %d", i,
		      (unsigned long long)wc.wr_id, wc.status);
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct tv_end e;
	struct tv_name me, peer;
	struct ibv_mr *mr;
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad;
	struct ibv_wc wc;
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(sender, &sock);
	tv_open(&e);
	mr = tv_region(&e, NMSG * MSG, IBV_ACCESS_LOCAL_WRITE);
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	tv_hear(sock, 'g');
	usleep(300000);	/* the SENDs fill what holds them */
	sge = (struct ibv_sge){ .addr = (uintptr_t)mr->addr, .length = 4096, .lkey = mr->lkey };
	wr = (struct ibv_send_wr){ .wr_id = 100, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
				   .send_flags = IBV_SEND_SIGNALED,
				   .wr.rdma = { .remote_addr = peer.addr + 3 * MSG, .rkey = peer.rkey } };
	TV_MUST(ibv_post_send(e.qp, &wr, &bad) == 0, "post the READ: %s", strerror(errno));
	wc = tv_wait(&e);
	TV_MUST(wc.wr_id == 100 && wc.status == IBV_WC_SUCCESS, "the READ behind the SENDs: wr %llu status %d",
		(unsigned long long)wc.wr_id, wc.status);
	tv_intact(mr->addr, 3, 4096, "the READ");
	for (uint32_t i = 0; i < NMSG; i++) {
		struct ibv_sge r = { .addr = (uintptr_t)mr->addr + i * MSG, .length = MSG, .lkey = mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = i, .sg_list = &r, .num_sge = 1 }, *rbad;

		TV_MUST(ibv_post_recv(e.qp, &rw, &rbad) == 0, "post receive %u", i);
	}
	for (uint32_t i = 0; i < NMSG; i++) {
		wc = tv_wait(&e);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == i && wc.byte_len == MSG,
		      "message %u: wr %llu status %d len %u", i, (unsigned long long)wc.wr_id, wc.status, wc.byte_len);
		tv_intact((uint8_t *)mr->addr + i * MSG, i, MSG, "a message");
	}
	tv_say(sock, 'k');
	tv_join(pid);
	return t_shim_finish();
}
