/* SPDX-License-Identifier: MIT */
/* Description: across hosts a UD lane is a connection the sender writes frames on; a hostile sender that writes its own nonsense there (an unknown op, then a frame claiming 1 GiB) breaks that lane only: the receiver keeps what came before, delivers nothing of the nonsense, stays in RTS without a crash or a hang, and the sender's next datagrams arrive over a new lane */
/* Channels: host-tcp */
#include <sys/socket.h>

#include "freeflow/verbs_layout.h"
#include "verbstest.h"

static int hostile(int sock)
{
	struct tv_end e;
	struct ibv_mr *mr;
	struct ibv_ah *ah;
	uint8_t h[FF_VW_HDR] = { 77 };
	uint32_t qpn, huge = 1u << 30;
	char c;
	int fd;

	tv_device(&e, NULL);
	tv_ud_qp(&e);
	mr = tv_region(&e, 256, IBV_ACCESS_LOCAL_WRITE);
	ah = tv_ah(&e, 0);
	TV_MUST(read(sock, &qpn, 4) == 4, "the receiver's QPN");
	CHECK(tv_send_dgram(&e, e.qp, mr, ah, qpn, TV_QKEY, 100, 1) == IBV_WC_SUCCESS, "datagram 1");
	fd = tv_wire_socket();
	TV_MUST(write(fd, h, sizeof(h)) == sizeof(h), "an unknown op");
	h[FF_VW_OP] = FF_VW_SEND;
	memcpy(h + FF_VW_LEN, &huge, 4);
	TV_MUST(write(fd, h, sizeof(h)) == sizeof(h), "a datagram of 1 GiB");
	tv_say(sock, 'h');
	/* Datagrams may be lost (the old lane is gone): send until the receiver has one. */
	for (int i = 0; i < 1000; i++) {
		struct pollfd p = { .fd = sock, .events = POLLIN };

		tv_send_dgram(&e, e.qp, mr, ah, qpn, TV_QKEY, 100, 2);
		if (poll(&p, 1, 10) == 1)
			break;
	}
	TV_MUST(read(sock, &c, 1) == 1 && c == 'k', "the receiver's word");
	return 0;
}

int main(int argc, char **argv)
{
	struct tv_end e;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr ia;
	uint8_t *buf;
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(hostile, &sock);
	tv_device(&e, NULL);
	tv_ud_qp(&e);
	mr = tv_region(&e, 40 + 256, IBV_ACCESS_LOCAL_WRITE);
	buf = mr->addr;
	for (uint64_t id = 1; id <= 8; id++)
		tv_post_recv(&e, mr, id);
	TV_MUST(write(sock, &e.qp->qp_num, 4) == 4, "tell our QPN");
	wc = tv_wait(&e);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.byte_len == 40 + 100 && ntohl(wc.imm_data) == 1,
	      "datagram 1: status %d len %u imm %u", wc.status, wc.byte_len, ntohl(wc.imm_data));
	tv_hear(sock, 'h');
	/* The nonsense delivers nothing; the next datagram that arrives is a real one, over a new lane. */
	wc = tv_wait(&e);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.byte_len == 40 + 100 && ntohl(wc.imm_data) == 2 &&
	      tv_intact(buf + 40, 2, 100, "datagram 2"),
	      "after the nonsense: status %d len %u imm %u, want datagram 2", wc.status, wc.byte_len,
	      ntohl(wc.imm_data));
	CHECK(ibv_query_qp(e.qp, &qa, IBV_QP_STATE, &ia) == 0 && qa.qp_state == IBV_QPS_RTS,
	      "the receiver's QP: state %d, want RTS", qa.qp_state);
	tv_say(sock, 'k');
	tv_join(pid);
	return t_exit_code();
}
