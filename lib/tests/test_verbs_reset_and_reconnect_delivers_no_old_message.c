/* SPDX-License-Identifier: MIT */
/* Description: an RC pair taken back to RESET (from RTS, or from ERR) and connected again, as programs that reuse or recover QPs do, starts clean as on a NIC: the receiver gets only the messages sent after the reconnect, bytes intact, never one taken before the reset nor one left in its ring untaken; also when one end reconnects and sends before the other has reset, and for a QP on an SRQ */
/* Channels: shm host-tcp */
#include "verbstest.h"

#define BUF	8192

enum mode { PLAIN, FROM_ERROR, LATE };

static const char *mode_name[] = { "reset", "error then reset", "reset late" };

/* Message n of round k: its seed and length. */
static uint32_t seed(int k, int n) { return 10u * (uint32_t)k + (uint32_t)n; }
static uint32_t len(int k, int n) { return n == 1 ? 100u + (uint32_t)k : n == 2 ? 3000u : 777u + (uint32_t)k; }

static void to_state(struct tv_end *e, enum ibv_qp_state st, const char *what)
{
	struct ibv_qp_attr a = { .qp_state = st };

	TV_MUST(ibv_modify_qp(e->qp, &a, IBV_QP_STATE) == 0, "%s: %s", what, strerror(errno));
}

/* RESET -> INIT, as tv_qp_srq, then RTR and RTS to the peer again. */
static void reconnect(struct tv_end *e, const struct tv_name *peer)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };

	TV_MUST(ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			      IBV_QP_ACCESS_FLAGS) == 0, "QP to INIT again: %s", strerror(errno));
	tv_connect(e, peer);
}

/* The sender's side of round k: two messages before the reset, one after. */
static void send_round(int sock, struct tv_end *e, struct ibv_mr *mr, const struct tv_name *peer, int k,
		       enum mode m)
{
	uint8_t *buf = mr->addr;
	struct ibv_wc wc;

	for (int n = 1; n <= 2; n++) {
		tv_send(e, mr, buf, len(k, n), seed(k, n));
		wc = tv_wait(e);
		TV_MUST(wc.status == IBV_WC_SUCCESS, "round %d: send %d: status %d", k, n, wc.status);
	}
	tv_say(sock, 'a');
	tv_hear(sock, 'b');
	if (m == FROM_ERROR)
		to_state(e, IBV_QPS_ERR, "sender to ERR");
	to_state(e, IBV_QPS_RESET, "sender to RESET");
	tv_say(sock, 'r');
	if (m != LATE)
		tv_hear(sock, 'r');
	/* LATE: connected again and sending while the receiver has not reset yet. */
	reconnect(e, peer);
	tv_send(e, mr, buf, len(k, 3), seed(k, 3));
	wc = tv_wait(e);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == seed(k, 3), "round %d (%s): the send after the reconnect: status %d wr_id %llu",
	      k, mode_name[m], wc.status, (unsigned long long)wc.wr_id);
	tv_hear(sock, 'd');
}

static void post(struct tv_end *e, struct ibv_srq *srq, struct ibv_mr *mr, uint8_t *at, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)at, .length = BUF, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;

	if (srq)
		tv_post_srq(srq, mr, at, BUF, id);
	else
		TV_MUST(ibv_post_recv(e->qp, &wr, &bad) == 0, "post receive %llu", (unsigned long long)id);
}

/*
 * The receiver's side of round k: takes the first message, leaves the
 * second in its ring, resets; then, connected again with two receives
 * posted, must get the third message alone. The second receive stays
 * posted: it takes the next round's first message (first: it is there).
 */
static void recv_round(int sock, struct tv_end *e, struct ibv_srq *srq, struct ibv_mr *mr,
		       const struct tv_name *peer, int k, enum mode m, int first)
{
	uint8_t *buf = mr->addr, *second = buf + BUF;
	uint64_t id = first ? 1 : 200 + (uint64_t)k - 1;
	struct ibv_wc wc;
	int64_t end;

	tv_hear(sock, 'a');
	if (first)
		post(e, srq, mr, buf, id);
	wc = tv_wait(e);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == id && wc.byte_len == len(k, 1),
	      "round %d: the first message: status %d wr_id %llu len %u", k, wc.status,
	      (unsigned long long)wc.wr_id, wc.byte_len);
	tv_intact(first ? buf : second, seed(k, 1), len(k, 1), "the first message");
	/* The second is in the ring (or the connection), no receive for it. */
	for (int i = 0; i < 10; i++)
		TV_MUST(ibv_poll_cq(e->cq, 1, &wc) == 0, "round %d: a completion with no receive posted", k);
	tv_say(sock, 'b');
	tv_hear(sock, 'r');
	if (m == LATE)
		usleep(100000);	/* the sender connects again and sends meanwhile */
	if (m == FROM_ERROR)
		to_state(e, IBV_QPS_ERR, "receiver to ERR");
	to_state(e, IBV_QPS_RESET, "receiver to RESET");
	if (m != LATE)
		tv_say(sock, 'r');
	/* RESET took no completion (and ERR none: no receive was posted). */
	TV_MUST(ibv_poll_cq(e->cq, 1, &wc) == 0, "round %d: a completion at the reset: wr_id %llu status %d",
		k, (unsigned long long)wc.wr_id, wc.status);
	reconnect(e, peer);
	memset(buf, 0, 2 * BUF);
	post(e, srq, mr, buf, 100 + (uint64_t)k);
	post(e, srq, mr, second, 200 + (uint64_t)k);
	wc = tv_wait(e);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.wr_id == 100 + (uint64_t)k &&
	      wc.byte_len == len(k, 3),
	      "round %d (%s): the first message after the reconnect: status %d wr_id %llu len %u, want wr_id %d len %u (len %u or %u: one from before the reset)",
	      k, mode_name[m], wc.status, (unsigned long long)wc.wr_id, wc.byte_len, 100 + k, len(k, 3),
	      len(k, 1), len(k, 2));
	tv_intact(buf, seed(k, 3), len(k, 3), "the message after the reconnect");
	for (end = t_ms() + 200; t_ms() < end;)
		CHECK(ibv_poll_cq(e->cq, 1, &wc) == 0, "round %d (%s): another message after the reconnect: wr_id %llu len %u",
		      k, mode_name[m], (unsigned long long)wc.wr_id, wc.byte_len);
	tv_say(sock, 'd');
}

static const enum mode rounds[] = { PLAIN, FROM_ERROR, LATE };
#define NROUNDS	(sizeof(rounds) / sizeof(rounds[0]))

/* The sender: a QP to the receiver's own-queue QP, then one to its SRQ QP, each through every round. */
static int sender(int sock)
{
	struct tv_end e, s;
	struct tv_name pe, ps;
	struct ibv_mr *mr;

	tv_open(&e);
	s = e;
	tv_qp(&s);
	mr = tv_region(&e, BUF, 0);
	pe = tv_link(sock, &e);
	ps = tv_link(sock, &s);
	for (size_t i = 0; i < NROUNDS; i++)
		send_round(sock, &e, mr, &pe, (int)i, rounds[i]);
	for (size_t i = 0; i < NROUNDS; i++)
		send_round(sock, &s, mr, &ps, (int)(NROUNDS + i), rounds[i]);
	return 0;
}

int main(int argc, char **argv)
{
	struct tv_end e, s;
	struct tv_name pe, ps;
	struct ibv_srq *srq;
	struct ibv_mr *mr;
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(sender, &sock);
	tv_open(&e);
	mr = tv_region(&e, 2 * BUF, IBV_ACCESS_LOCAL_WRITE);
	srq = tv_srq(&e, 8, NULL);
	s = e;
	tv_qp_srq(&s, srq);
	pe = tv_link(sock, &e);
	ps = tv_link(sock, &s);
	for (size_t i = 0; i < NROUNDS; i++)
		recv_round(sock, &e, NULL, mr, &pe, (int)i, rounds[i], i == 0);
	for (size_t i = 0; i < NROUNDS; i++)
		recv_round(sock, &s, srq, mr, &ps, (int)(NROUNDS + i), rounds[i], i == 0);
	tv_join(pid);
	return t_shim_finish();
}
