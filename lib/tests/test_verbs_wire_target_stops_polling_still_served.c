/* SPDX-License-Identifier: MIT */
/* Description: a target whose program polled its CQ in a loop while SENDs came (its event thread then stops waking for each frame that arrives) and then stops polling and waits on a socket is still served: a READ of its memory completes with its bytes, as from a target that never polled */
/* Channels: shm host-tcp */
#include "verbstest.h"

#define LEN 100000
#define SENDS 50	/* a millisecond apart: frames come while the target polls */

static int target(int sock)
{
	struct tv_end e;
	struct tv_name me, peer;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	int64_t until;

	tv_open(&e);
	mr = tv_region(&e, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	for (uint32_t i = 0; i < LEN; i++)
		((uint8_t *)mr->addr)[i] = tv_pattern(3, i);
	for (int i = 0; i < SENDS; i++)
		tv_post_recv(&e, mr, 1);
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102, .rkey = mr->rkey, .addr = (uintptr_t)mr->addr };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	for (int i = 0; i < SENDS; i++) {
		wc = tv_wait(&e);
		TV_MUST(wc.status == IBV_WC_SUCCESS && wc.wr_id == 1, "SEND %d: status %d", i, wc.status);
	}
	/* Polling a while longer: long enough for the event thread to notice. */
	for (until = t_ms() + 50; t_ms() < until;)
		CHECK(ibv_poll_cq(e.cq, 1, &wc) == 0, "a completion nobody asked for");
	for (uint32_t i = 0; i < LEN; i++)	/* the SENDs wrote over the start */
		((uint8_t *)mr->addr)[i] = tv_pattern(3, i);
	tv_say(sock, 'p');
	tv_hear(sock, 'x');	/* no verbs call meanwhile */
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
	pid = tv_fork(target, &sock);
	tv_open(&e);
	mr = tv_region(&e, LEN, IBV_ACCESS_LOCAL_WRITE);
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	for (int i = 0; i < SENDS; i++) {
		tv_send(&e, mr, mr->addr, 64, 5);
		TV_MUST(tv_wait(&e).status == IBV_WC_SUCCESS, "SEND %d", i);
		usleep(1000);
	}
	tv_hear(sock, 'p');
	memset(mr->addr, 0, LEN);
	sge = (struct ibv_sge){ .addr = (uintptr_t)mr->addr, .length = LEN, .lkey = mr->lkey };
	wr = (struct ibv_send_wr){ .wr_id = 2, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
				   .send_flags = IBV_SEND_SIGNALED,
				   .wr.rdma = { .remote_addr = peer.addr, .rkey = peer.rkey } };
	TV_MUST(ibv_post_send(e.qp, &wr, &bad) == 0, "post the READ: %s", strerror(errno));
	wc = tv_wait(&e);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 2, "the READ of a target that stopped polling: status %d",
	      wc.status);
	tv_intact(mr->addr, 3, LEN, "the READ");
	tv_say(sock, 'x');
	tv_join(pid);
	return t_shim_finish();
}
