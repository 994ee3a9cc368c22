/* SPDX-License-Identifier: MIT */
/* Description: across hosts, a hostile peer that writes SEND pieces past the room its victim told it of (a receiver never stops reading for want of room: an honest sender waits for CREDIT) fails only the victim's QP and ends the connection, without a hang or a write outside the ring; what came before is delivered */
/* Channels: host-tcp */
#include <netinet/in.h>
#include <sys/socket.h>

#include "verbstest.h"

#define PIECES	(FF_VW_RING / FF_VW_PIECE + 1)	/* one more than the ring holds */

static int hostile(int sock)
{
	static uint8_t piece[FF_VW_PIECE];
	struct tv_end e;
	struct tv_name me, peer;
	struct ibv_mr *mr;
	uint8_t h[FF_VW_HDR] = { 0 }, end;
	uint64_t total = (uint64_t)PIECES * FF_VW_PIECE;
	uint32_t len = FF_VW_PIECE;
	int fd;

	tv_open(&e);
	mr = tv_region(&e, 64, IBV_ACCESS_LOCAL_WRITE);
	strcpy(mr->addr, "hi");
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	fd = tv_take_wire(&e, mr);
	h[FF_VW_OP] = FF_VW_SEND;
	memcpy(h + FF_VW_LEN, &len, 4);
	memcpy(h + FF_VW_ARG1, &total, 8);
	for (uint32_t i = 0; i < PIECES; i++) {
		h[FF_VW_FLAGS] = i == 0 ? FF_VQP_FIRST : 0;
		if (write(fd, h, sizeof(h)) != sizeof(h) || write(fd, piece, sizeof(piece)) != sizeof(piece))
			break;	/* the victim ended it */
	}
	CHECK(recv(fd, &end, 1, 0) == 0, "the victim ends the connection");
	tv_say(sock, 'd');
	tv_hear(sock, 'k');
	return 0;
}

int main(int argc, char **argv)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr qa;
	struct tv_end e;
	struct tv_name me, peer;
	struct ibv_mr *rx;
	struct ibv_wc wc;
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(hostile, &sock);
	tv_open(&e);
	rx = tv_region(&e, 64, IBV_ACCESS_LOCAL_WRITE);
	tv_post_recv(&e, rx, 1);
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	tv_hear(sock, 'd');
	wc = tv_wait(&e);
	CHECK(wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS && !strcmp((char *)rx->addr, "hi"),
	      "the real SEND: wr %llu status %d", (unsigned long long)wc.wr_id, wc.status);
	CHECK(ibv_query_qp(e.qp, &qa, IBV_QP_STATE, &ia) == 0 && qa.qp_state == IBV_QPS_ERR,
	      "the QP the hostile peer wrote past its room into: state %d, want ERR", qa.qp_state);
	tv_say(sock, 'k');
	tv_join(pid);
	return t_exit_code();
}
