/* SPDX-License-Identifier: MIT */
/* Description: a survivor that only receives from now on (it answered its peer once, so it reached it: a QP that never sent learns nothing of its peer, on a NIC too) and sleeps in ibv_get_cq_event after taking its peer's last message gets its other receive flushed once the retry budget is spent (ibv_rc_pingpong -e's server waits so; the budget started on the program's call while the event thread slept with no clock, and no flush ever came) */
/* Channels: shm host-tcp */
#include "verbstest.h"

static int peer(int sock)
{
	struct tv_end e;
	struct ibv_mr *mr;

	tv_open(&e);
	mr = tv_region(&e, 64, IBV_ACCESS_LOCAL_WRITE);
	tv_post_recv(&e, mr, 9);
	tv_link(sock, &e);
	tv_send(&e, mr, mr->addr, 64, 1);
	/* The SEND, and the survivor's answer: it has reached us (a NIC's QP that never sent knows nothing of us). */
	for (int i = 0; i < 2; i++)
		TV_MUST(tv_wait(&e).status == IBV_WC_SUCCESS, "completion %d", i);
	TV_MUST(ibv_destroy_qp(e.qp) == 0, "destroy the QP");
	tv_say(sock, 'd');
	return 0;
}

int main(int argc, char **argv)
{
	struct ibv_comp_channel *ch;
	struct tv_end e;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(peer, &sock);
	tv_open_ch(&e, &ch);
	mr = tv_region(&e, 64, IBV_ACCESS_LOCAL_WRITE);
	tv_post_recv(&e, mr, 1);
	tv_post_recv(&e, mr, 2);
	TV_MUST(ibv_req_notify_cq(e.cq, 0) == 0, "arm");
	tv_link(sock, &e);
	tv_event(&e, ch, "the message");
	ibv_ack_cq_events(e.cq, 1);
	TV_MUST(ibv_poll_cq(e.cq, 1, &wc) == 1 && wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS, "the message");
	tv_send(&e, mr, mr->addr, 8, 3);
	TV_MUST(tv_wait(&e).status == IBV_WC_SUCCESS, "the answer");
	tv_hear(sock, 'd');
	tv_join(pid);
	TV_MUST(ibv_req_notify_cq(e.cq, 0) == 0, "arm again");
	if (ibv_poll_cq(e.cq, 1, &wc) == 0) {	/* arm, then look: as ibv_rc_pingpong -e */
		tv_event(&e, ch, "the flush");
		ibv_ack_cq_events(e.cq, 1);
		TV_MUST(ibv_poll_cq(e.cq, 1, &wc) == 1, "the flush after its event");
	}
	CHECK(wc.wr_id == 2 && wc.status == IBV_WC_WR_FLUSH_ERR, "receive 2: wr %llu status %d, want flushed",
	      (unsigned long long)wc.wr_id, wc.status);
	return t_shim_finish();
}
