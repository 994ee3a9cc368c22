/* SPDX-License-Identifier: MIT */
/* Description: a peer that destroys its QPs and exits with a SEND half written (ibv_srq_pingpong does: it stops at its own counts with up to one message per QP past its peer's last expected one): the survivor's QP holding that half message has its receive flushed only once the QP's retry budget is spent, as a NIC notices a silent peer, so the messages already in its other QPs, sharing its SRQ and CQ, complete first (the flush came first and failed ibv_srq_pingpong 1 MiB about one CI run in four) */
/* Channels: shm host-tcp */
#include "verbstest.h"

/* More than a ring and a loopback TCP connection hold: its end waits for room. */
#define BIG	(16u << 20)

/* The peer: QP a part way through a 16 MiB SEND, a whole message on QP b, then gone. */
static int peer(int sock)
{
	struct tv_end a, b;
	struct ibv_mr *mr;
	struct ibv_wc wc;

	tv_open(&a);
	b = a;
	tv_qp(&b);
	mr = tv_region(&a, BIG + 100, 0);
	tv_link(sock, &a);
	tv_link(sock, &b);
	tv_say(sock, 'c');
	tv_hear(sock, 'g');
	tv_send(&a, mr, mr->addr, BIG, 99);
	tv_send(&b, mr, (uint8_t *)mr->addr + BIG, 100, 7);
	wc = tv_wait(&b);
	TV_MUST(wc.wr_id == 7 && wc.status == IBV_WC_SUCCESS, "the whole message: wr %llu status %d",
		(unsigned long long)wc.wr_id, wc.status);
	TV_MUST(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0, "destroy the QPs");
	tv_say(sock, 'd');
	return 0;
}

int main(int argc, char **argv)
{
	struct tv_end e, a, b;
	struct ibv_srq *srq;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	uint8_t *buf;
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(peer, &sock);
	tv_device(&e, NULL);
	srq = tv_srq(&e, 8, NULL);
	mr = tv_region(&e, 2 * BIG, IBV_ACCESS_LOCAL_WRITE);
	buf = mr->addr;
	tv_post_srq(srq, mr, buf, BIG, 1);
	tv_post_srq(srq, mr, buf + BIG, BIG, 2);
	/* b before a: a poll looks at the newest QP first, so at a's half message before b's. */
	a = b = e;
	tv_qp_srq(&b, srq);
	tv_qp_srq(&a, srq);
	tv_link(sock, &a);
	tv_link(sock, &b);
	/*
	 * Both QPs reach the peer's once it connected them (a poll asks the
	 * agent, at most every millisecond): a QP that never did cannot see
	 * its peer die, a NIC's neither.
	 */
	tv_hear(sock, 'c');
	for (int64_t until = t_ms() + 5; t_ms() < until;)
		TV_MUST(ibv_poll_cq(e.cq, 1, &wc) == 0, "a completion before any message");
	tv_say(sock, 'g');
	tv_hear(sock, 'd');
	tv_join(pid);

	wc = tv_wait(&e);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.qp_num == b.qp->qp_num && wc.byte_len == 100,
	      "first the whole message on QP b: status %d qp_num %#x len %u, want success on %#x, 100 bytes",
	      wc.status, wc.qp_num, wc.byte_len, b.qp->qp_num);
	tv_intact(buf + (wc.wr_id - 1) * BIG, 7, 100, "the whole message");
	/* Then, once a NIC's retries would have run out, the receive QP a holds: nothing hangs. */
	wc = tv_wait(&e);
	CHECK(wc.status == IBV_WC_WR_FLUSH_ERR && wc.qp_num == a.qp->qp_num,
	      "then the half message's receive: status %d qp_num %#x, want flushed on %#x",
	      wc.status, wc.qp_num, a.qp->qp_num);
	CHECK(ibv_poll_cq(e.cq, 1, &wc) == 0, "a receive of the SRQ was flushed too (wr_id %llu)",
	      (unsigned long long)wc.wr_id);
	return t_shim_finish();
}
