/* SPDX-License-Identifier: MIT */
/* Description: a message that arrives before any receive is posted (to the QP's own queue, or to an empty SRQ) waits, as RNR on a NIC, and lands intact in the receive posted later; a receiver that armed its CQ and sleeps on the completion channel after posting that receive gets its event, without polling */
/* Channels: shm host-tcp */
#include "verbstest.h"

#define LEN	5000

/* The peer: one message on QP r (to the receiver's own-queue QP), then two on QP s (to its SRQ QP). */
static int peer(int sock)
{
	struct tv_end r, s;
	struct ibv_mr *mr;

	tv_open(&r);
	s = r;
	tv_qp(&s);
	mr = tv_region(&r, LEN, 0);
	tv_link(sock, &r);
	tv_link(sock, &s);
	for (uint32_t id = 1; id <= 3; id++) {
		tv_hear(sock, 'n');
		tv_send(id == 1 ? &r : &s, mr, mr->addr, LEN, id);
		CHECK(tv_wait(&r).status == IBV_WC_SUCCESS, "send %u", id);
		tv_say(sock, 's');
	}
	tv_hear(sock, 'x');
	return 0;
}

/* The peer sends message id; it reaches the receiver's ring, where no receive waits for it yet. */
static void arrives(int sock, struct tv_end *e, uint32_t id)
{
	struct ibv_wc wc;

	tv_say(sock, 'n');
	tv_hear(sock, 's');
	for (int i = 0; i < 10; i++)
		TV_MUST(ibv_poll_cq(e->cq, 1, &wc) == 0, "message %u completed with no receive posted", id);
}

static void got(struct tv_end *e, struct ibv_qp *qp, uint8_t *buf, uint32_t id)
{
	struct ibv_wc wc = tv_wait(e);

	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == id && wc.qp_num == qp->qp_num &&
	      wc.byte_len == LEN, "message %u: status %d wr_id %llu qp_num %#x len %u", id, wc.status,
	      (unsigned long long)wc.wr_id, wc.qp_num, wc.byte_len);
	tv_intact(buf, id, LEN, "a message received late");
}

int main(int argc, char **argv)
{
	struct ibv_comp_channel *ch;
	struct tv_end e, s;
	struct ibv_srq *srq;
	struct ibv_mr *mr;
	uint8_t *buf;
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(peer, &sock);
	tv_open_ch(&e, &ch);
	mr = tv_region(&e, LEN, IBV_ACCESS_LOCAL_WRITE);
	buf = mr->addr;
	srq = tv_srq(&e, 4, NULL);
	s = e;
	tv_qp_srq(&s, srq);
	tv_link(sock, &e);
	tv_link(sock, &s);

	/* The QP's own queue, a sleeper: armed, then the receive, then asleep on the channel. */
	arrives(sock, &e, 1);
	TV_MUST(ibv_req_notify_cq(e.cq, 0) == 0, "arm the CQ");
	{
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = LEN, .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;

		TV_MUST(ibv_post_recv(e.qp, &wr, &bad) == 0, "post the late receive");
	}
	tv_event(&e, ch, "a receive posted after its message arrived");
	ibv_ack_cq_events(e.cq, 1);
	got(&e, e.qp, buf, 1);

	/* An empty SRQ, polled: the message waits, then goes on once a receive is posted. */
	arrives(sock, &e, 2);
	tv_post_srq(srq, mr, buf, LEN, 2);
	got(&e, s.qp, buf, 2);

	/* An empty SRQ, a sleeper. */
	arrives(sock, &e, 3);
	TV_MUST(ibv_req_notify_cq(e.cq, 0) == 0, "arm the CQ");
	tv_post_srq(srq, mr, buf, LEN, 3);
	tv_event(&e, ch, "an SRQ receive posted after its message arrived");
	ibv_ack_cq_events(e.cq, 1);
	got(&e, s.qp, buf, 3);

	tv_say(sock, 'x');
	tv_join(pid);
	CHECK(ibv_destroy_qp(s.qp) == 0 && ibv_destroy_srq(srq) == 0, "destroy the QP and the SRQ");
	return t_shim_finish();
}
