/* SPDX-License-Identifier: MIT */
/* Description: completion channels on the virtual verbs device: a receiver asleep in ibv_get_cq_event is woken by the other process's SEND (no lost wake-up: also when the SEND came before the arm); a completion already in the CQ at the arm makes no event (the IB spec's next completion, which perftest relies on); a solicited-only arm ignores an unsolicited receive and fires on a solicited one; a sender asleep in ibv_get_cq_event behind a SEND larger than the peer's ring is woken as the receiver makes room; events name the CQ and its context, are counted and acked; a receiver asleep when its peer goes is woken and finds its receive flushed; the channel fd is close-on-exec and goes with ibv_destroy_comp_channel, which refuses while a CQ uses it */
/* Channels: shm host-tcp */
#include "verbstest.h"

#define BIG (3u << 20)	/* past the 1 MiB ring: the send waits for room */

/* The sender: its own CQ has a channel too, for the wait behind the big SEND. */
static int sender(int sock)
{
	static const uint32_t lens[] = { 0, 1000, 2000, 2500, 3000, 4000, BIG };
	struct ibv_comp_channel *ch;
	struct tv_end e;
	struct tv_name me, peer;
	uint8_t *buf = malloc(BIG);
	struct ibv_mr *mr;
	struct ibv_wc wc;

	tv_open_ch(&e, &ch);
	mr = ibv_reg_mr(e.pd, buf, BIG, 0);
	TV_MUST(buf && mr, "register the send buffer: %s", strerror(errno));
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	for (uint64_t id = 1; id <= 6; id++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = lens[id], .lkey = mr->lkey };
		struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED |
							(id == 5 ? IBV_SEND_SOLICITED : 0) }, *bad;

		tv_hear(sock, (char)('0' + id));
		for (uint32_t k = 0; k < lens[id]; k++)
			buf[k] = tv_pattern((uint32_t)id, k);
		if (id == 6)	/* armed before the post: the completion comes while we sleep */
			TV_MUST(ibv_req_notify_cq(e.cq, 0) == 0, "arm the sender's CQ");
		TV_MUST(ibv_post_send(e.qp, &wr, &bad) == 0, "post send %llu", (unsigned long long)id);
		if (id == 6) {
			/*
			 * The receiver takes nothing until told: the rest waits for room
			 * (across hosts, the connection's buffers may hold all of it).
			 */
			TV_MUST(fv_across_hosts() || ibv_poll_cq(e.cq, 1, &wc) == 0,
				"a 3 MiB send into a 1 MiB ring completed at once");
			tv_say(sock, 's');
			tv_event(&e, ch, "the sender, behind a send larger than the ring");
			ibv_ack_cq_events(e.cq, 1);
		}
		wc = tv_wait(&e);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == id, "send %llu: status %d wr_id %llu",
		      (unsigned long long)id, wc.status, (unsigned long long)wc.wr_id);
		tv_say(sock, 'a');
	}
	tv_hear(sock, 'x');
	CHECK(ibv_destroy_qp(e.qp) == 0 && ibv_destroy_cq(e.cq) == 0 &&
	      ibv_destroy_comp_channel(ch) == 0, "the sender's teardown");
	return 0;
}

int main(int argc, char **argv)
{
	struct ibv_comp_channel *ch;
	struct tv_end e;
	struct tv_name me, peer;
	uint8_t *buf = malloc(BIG);
	struct ibv_mr *mr;
	int sock, events = 0, fd;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(sender, &sock);
	tv_open_ch(&e, &ch);
	CHECK((fcntl(ch->fd, F_GETFD) & FD_CLOEXEC) != 0, "the channel fd is close-on-exec");
	mr = ibv_reg_mr(e.pd, buf, BIG, IBV_ACCESS_LOCAL_WRITE);
	TV_MUST(buf && mr, "register the receive buffer: %s", strerror(errno));
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);

	/* 1: the SEND comes while we sleep in ibv_get_cq_event: the peer must wake us. */
	tv_post_recv(&e, mr, 1);
	TV_MUST(ibv_req_notify_cq(e.cq, 0) == 0, "arm");
	tv_say(sock, '1');
	tv_event(&e, ch, "asleep when the SEND came");
	events++;
	tv_got(&e, mr, 1, 1000);
	tv_hear(sock, 'a');

	/* 2: the SEND came before the arm: the arm finds it, the event comes at once. */
	tv_post_recv(&e, mr, 2);
	tv_say(sock, '2');
	tv_hear(sock, 'a');
	TV_MUST(ibv_req_notify_cq(e.cq, 0) == 0, "arm after the SEND came");
	tv_event(&e, ch, "armed after the SEND came");
	events++;
	tv_got(&e, mr, 2, 2000);
	CHECK(tv_no_event(ch), "one event per arm");

	/* 3: a completion already in the CQ at the arm makes no event (IB spec: the next one does). */
	tv_post_recv(&e, mr, 3);
	tv_say(sock, '3');
	tv_hear(sock, 'a');
	CHECK(ibv_poll_cq(e.cq, 0, NULL) == 0, "poll for nothing");	/* takes the SEND in: its completion waits */
	TV_MUST(ibv_req_notify_cq(e.cq, 0) == 0, "arm with a completion in the CQ");
	CHECK(tv_no_event(ch), "an arm fired for a completion already in the CQ");
	tv_got(&e, mr, 3, 2500);

	/* 4: solicited only: no event for an unsolicited receive (polled here), one for a solicited one. */
	TV_MUST(ibv_req_notify_cq(e.cq, 1) == 0, "arm for solicited events");
	tv_post_recv(&e, mr, 4);
	tv_say(sock, '4');
	tv_hear(sock, 'a');
	tv_got(&e, mr, 4, 3000);
	CHECK(tv_no_event(ch), "an unsolicited receive made an event while armed solicited-only");
	tv_post_recv(&e, mr, 5);
	tv_say(sock, '5');
	tv_event(&e, ch, "a solicited receive");
	events++;
	tv_got(&e, mr, 5, 4000);
	tv_hear(sock, 'a');
	ibv_ack_cq_events(e.cq, events);

	/* 5: unarmed, we take nothing until the sender sleeps behind 3 MiB; taking makes room and wakes it. */
	tv_post_recv(&e, mr, 6);
	tv_say(sock, '6');
	tv_hear(sock, 's');
	tv_got(&e, mr, 6, BIG);
	tv_hear(sock, 'a');

	CHECK(ibv_destroy_comp_channel(ch) == EBUSY, "destroying a channel a CQ uses is refused");
	/* 6: the peer goes while we sleep with a receive posted: woken, it is flushed, as a poll finds. */
	tv_post_recv(&e, mr, 7);
	TV_MUST(ibv_req_notify_cq(e.cq, 0) == 0, "arm before the peer goes");
	tv_say(sock, 'x');
	tv_event(&e, ch, "asleep when the peer went");
	{
		struct ibv_wc wc = tv_wait(&e);

		CHECK(wc.wr_id == 7 && wc.status == IBV_WC_WR_FLUSH_ERR,
		      "the receive posted when the peer went: wr %llu status %d, want flushed",
		      (unsigned long long)wc.wr_id, wc.status);
	}
	ibv_ack_cq_events(e.cq, 1);
	tv_join(pid);
	fd = ch->fd;
	CHECK(ibv_destroy_qp(e.qp) == 0 && ibv_destroy_cq(e.cq) == 0, "destroy the QP and CQ");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy the channel");
	CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF, "the channel fd is closed with it");
	return t_shim_finish();
}
