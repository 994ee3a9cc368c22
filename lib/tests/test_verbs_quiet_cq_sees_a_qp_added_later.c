/* SPDX-License-Identifier: MIT */
/* Description: a CQ polled empty many times (its quiet snapshot taken) still sees a message that comes through a QP made on it afterwards, and one through its first QP after that; a receive posted on a quiet CQ's QP whose peer then dies is flushed */
/* Channels: shm host-tcp */
#include "verbstest.h"

#define LEN 4096

static int peer(int sock)
{
	struct tv_end e, e2;
	struct ibv_mr *mr;

	tv_open(&e);
	mr = tv_region(&e, LEN, IBV_ACCESS_LOCAL_WRITE);
	tv_link(sock, &e);
	tv_hear(sock, 'a');
	tv_send(&e, mr, mr->addr, LEN, 1);
	CHECK(tv_wait(&e).status == IBV_WC_SUCCESS, "send 1");
	/* A second QP, on the same CQ on this side too. */
	e2 = e;
	tv_qp(&e2);
	tv_link(sock, &e2);
	tv_hear(sock, 'b');
	tv_send(&e2, mr, mr->addr, LEN, 2);
	CHECK(tv_wait(&e2).status == IBV_WC_SUCCESS, "send 2");
	tv_hear(sock, 'c');
	tv_send(&e, mr, mr->addr, LEN, 3);
	CHECK(tv_wait(&e).status == IBV_WC_SUCCESS, "send 3");
	tv_hear(sock, 'd');
	return 0;	/* and exit: the other side's receive still posted is flushed */
}

/* Polls that find nothing: the CQ's quiet snapshot is taken, and looked at. */
static void poll_empty(struct tv_end *e)
{
	struct ibv_wc wc;

	for (int i = 0; i < 100000; i++)
		CHECK(ibv_poll_cq(e->cq, 1, &wc) == 0, "poll %d found a completion (status %d)", i, wc.status);
}

int main(int argc, char **argv)
{
	struct tv_end e, e2;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(peer, &sock);
	tv_open(&e);
	mr = tv_region(&e, LEN, IBV_ACCESS_LOCAL_WRITE);
	tv_link(sock, &e);
	tv_post_recv(&e, mr, 1);
	poll_empty(&e);
	tv_say(sock, 'a');
	tv_got(&e, mr, 1, LEN);
	poll_empty(&e);
	/* A QP made and connected after the CQ went quiet. */
	e2 = e;
	tv_qp(&e2);
	tv_link(sock, &e2);
	tv_post_recv(&e2, mr, 2);
	poll_empty(&e);
	tv_say(sock, 'b');
	tv_got(&e2, mr, 2, LEN);
	/* The first QP again, polled quiet with the second one on the CQ. */
	tv_post_recv(&e, mr, 3);
	poll_empty(&e);
	tv_say(sock, 'c');
	tv_got(&e, mr, 3, LEN);
	/* A receive waiting on a quiet CQ when the peer dies: flushed, not waited for ever. */
	tv_post_recv(&e, mr, 4);
	poll_empty(&e);
	tv_say(sock, 'd');
	tv_join(pid);
	wc = tv_wait(&e);
	CHECK(wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 4, "after the peer died: status %d wr_id %llu",
	      wc.status, (unsigned long long)wc.wr_id);
	return t_exit_code();
}
