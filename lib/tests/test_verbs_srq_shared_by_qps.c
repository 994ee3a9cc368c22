/* SPDX-License-Identifier: MIT */
/* Description: three QPs of one process share one SRQ; three peer processes SEND to them at once, messages of 1 B to 2 MiB (past the 1 MiB ring, so in pieces that interleave across the QPs): every message lands intact in its own receive, with the right wc.qp_num and src_qp, in order per QP, and a receive is taken from the SRQ at a message's first piece and held to its last */
#include "verbstest.h"

#define PEERS	3
#define BIG	(2u << 20)
static const uint32_t sizes[] = { 1, 300000, 4096, BIG, 17, 200000 };
#define N	(sizeof(sizes) / sizeof(sizes[0]))

static int me_id;	/* the peer process's number, set before its fork */

static uint32_t seed(int peer, size_t i)
{
	return (uint32_t)(peer * 100 + i);
}

/* A peer: its QP connected to the receiver's, every message posted, then moved along to the end. */
static int sender(int sock)
{
	struct tv_end e;
	struct ibv_mr *mr;
	uint8_t *at;

	tv_open(&e);
	mr = tv_region(&e, BIG * 2, 0);
	at = mr->addr;
	tv_link(sock, &e);
	for (size_t i = 0; i < N; at += sizes[i], i++)
		tv_send(&e, mr, at, sizes[i], seed(me_id, i));
	tv_say(sock, 'p');	/* posted: what fits is in the receiver's ring, the rest waits */
	for (size_t i = 0; i < N; i++) {
		struct ibv_wc wc = tv_wait(&e);

		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == seed(me_id, i),
		      "peer %d send %zu: status %d wr_id %llu", me_id, i, wc.status,
		      (unsigned long long)wc.wr_id);
	}
	tv_hear(sock, 'x');
	return 0;
}

int main(int argc, char **argv)
{
	struct tv_end e, qps[PEERS];
	struct tv_name peer[PEERS];
	struct ibv_srq *srq;
	struct ibv_mr *mr;
	uint8_t *buf;
	int sock[PEERS], got = 0, interleaved = 0;
	size_t next[PEERS] = { 0 };
	uint64_t last_wr = 0;
	pid_t pid[PEERS];

	(void)argc;
	tv_setup(argv);
	for (int p = 0; p < PEERS; p++) {
		me_id = p;
		pid[p] = tv_fork(sender, &sock[p]);
	}
	tv_device(&e, NULL);
	srq = tv_srq(&e, PEERS * N, NULL);
	mr = tv_region(&e, (size_t)BIG * PEERS * N, IBV_ACCESS_LOCAL_WRITE);
	buf = mr->addr;
	for (uint64_t w = 0; w < PEERS * N; w++)
		tv_post_srq(srq, mr, buf + w * BIG, BIG, w);
	for (int p = 0; p < PEERS; p++) {
		qps[p] = e;
		tv_qp_srq(&qps[p], srq);
		peer[p] = tv_link(sock[p], &qps[p]);
	}
	/* Every peer's first megabyte waits in its ring before the first poll takes any. */
	for (int p = 0; p < PEERS; p++)
		tv_hear(sock[p], 'p');
	while (got < (int)(PEERS * N)) {
		struct ibv_wc wc = tv_wait(&e);
		int p = 0;
		char what[64];

		while (p < PEERS && wc.qp_num != qps[p].qp->qp_num)
			p++;
		TV_MUST(p < PEERS && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV &&
			wc.src_qp == peer[p].qpn && wc.wr_id < PEERS * N && next[p] < N &&
			wc.byte_len == sizes[next[p]],
			"completion %d: status %d opcode %d qp_num %#x src_qp %#x wr_id %llu len %u "
			"(QP %d's message %zu)", got, wc.status, wc.opcode, wc.qp_num, wc.src_qp,
			(unsigned long long)wc.wr_id, wc.byte_len, p, p < PEERS ? next[p] : 0);
		snprintf(what, sizeof(what), "peer %d message %zu in receive %llu", p, next[p],
			 (unsigned long long)wc.wr_id);
		tv_intact(buf + wc.wr_id * BIG, seed(p, next[p]), wc.byte_len, what);
		/* A receive taken before one that completed earlier: messages overlapped. */
		interleaved |= got && wc.wr_id < last_wr;
		last_wr = wc.wr_id;
		next[p]++;
		got++;
	}
	CHECK(interleaved, "no message of one QP was in progress while another QP's completed: "
	      "the test did not interleave pieces");
	for (int p = 0; p < PEERS; p++) {
		tv_say(sock[p], 'x');
		tv_join(pid[p]);
		CHECK(ibv_destroy_qp(qps[p].qp) == 0, "destroy QP %d", p);
	}
	CHECK(ibv_destroy_srq(srq) == 0, "destroy the SRQ once no QP uses it");
	return t_shim_finish();
}
