/* SPDX-License-Identifier: MIT */
/* Description: across hosts a receiver that posts its receives 12 s late, its ring full and its sender's SENDs waiting for room meanwhile, loses nothing: with rnr_retry 7 a NIC waits, and so does the link (a TCP user timeout ended it after 10 s, and 4 SENDs that had completed were never delivered) */
/* Channels: host-tcp */
#include "verbstest.h"

#define MSG (1u << 20)
#define NMSG 8

static int sender(int sock)
{
	struct tv_end e;
	struct tv_name me, peer;
	struct ibv_mr *mr;
	int ok = 0;

	tv_open(&e);
	mr = tv_region(&e, MSG, IBV_ACCESS_LOCAL_WRITE);
	memset(mr->addr, 's', MSG);
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	for (int i = 0; i < NMSG; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)mr->addr, .length = MSG, .lkey = mr->lkey };
		struct ibv_send_wr wr = { .wr_id = 10 + i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;
		TV_MUST(ibv_post_send(e.qp, &wr, &bad) == 0, "post SEND %d", i);
	}
	for (int i = 0; i < NMSG; i++) {
		struct ibv_wc wc = { 0 };
		int64_t end = t_ms() + 20000;
		while (ibv_poll_cq(e.cq, 1, &wc) == 0 && t_ms() < end)
			usleep(1000);
		if (wc.status != IBV_WC_SUCCESS)
			fprintf(stderr, "sender: SEND %llu status %d\n", (unsigned long long)wc.wr_id, wc.status);
		ok += wc.status == IBV_WC_SUCCESS;
	}
	CHECK(ok == NMSG, "sender: %d of %d SENDs", ok, NMSG);
	tv_hear(sock, 'k');
	return 0;
}

int main(int argc, char **argv)
{
	struct tv_end e;
	struct tv_name me, peer;
	struct ibv_mr *mr;
	int sock, ok = 0;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(sender, &sock);
	tv_open(&e);
	mr = tv_region(&e, MSG, IBV_ACCESS_LOCAL_WRITE);
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	sleep(12);
	for (int i = 0; i < NMSG; i++)
		tv_post_recv(&e, mr, i);
	for (int i = 0; i < NMSG; i++) {
		struct ibv_wc wc = { 0 };
		int64_t end = t_ms() + 5000;
		while (ibv_poll_cq(e.cq, 1, &wc) == 0 && t_ms() < end)
			;
		if (wc.status != IBV_WC_SUCCESS)
			fprintf(stderr, "receiver: %llu status %d\n", (unsigned long long)wc.wr_id, wc.status);
		ok += wc.status == IBV_WC_SUCCESS;
	}
	CHECK(ok == NMSG, "receiver: %d of %d messages", ok, NMSG);
	tv_say(sock, 'k');
	tv_join(pid);
	return t_exit_code();
}
