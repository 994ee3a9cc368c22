/* SPDX-License-Identifier: MIT */
/* Description: a hostile peer that rings another process's doorbell (the AF_UNIX datagram socket the agent handed it) as fast as it can, while that process sleeps in ibv_get_cq_event with its CQ armed, makes no event and no completion (each ring costs a scan), and the SENDs it then makes, also with the ringing going on, arrive intact, one event each */
#include <sys/socket.h>

#include "verbstest.h"

#define RINGS	20000	/* far more than a datagram socket queues: most are taken by scans */
#define ROUNDS	3

/*
 * The peer's doorbell: the only AF_UNIX datagram socket of this process
 * that another process made (our own doorbell is a pair we made).
 */
static int find_doorbell(void)
{
	int found = -1;

	for (int fd = 3; fd < 1024; fd++) {
		int dom = 0, typ = 0;
		struct ucred cr;
		socklen_t l = sizeof(int), cl = sizeof(cr);

		if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &l) == 0 &&
		    getsockopt(fd, SOL_SOCKET, SO_TYPE, &typ, &l) == 0 && dom == AF_UNIX && typ == SOCK_DGRAM &&
		    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0 && cr.pid != getpid()) {
			TV_MUST(found < 0, "two datagram sockets (%d, %d): which is the doorbell?", found, fd);
			found = fd;
		}
	}
	TV_MUST(found >= 0, "no doorbell was handed over with the peer's QP");
	return found;
}

/* Blocking rings: each returns only once the owner's thread has made room by draining. */
static void spam(int bell)
{
	for (int i = 0; i < RINGS; i++)
		TV_MUST(send(bell, "", 1, MSG_NOSIGNAL) == 1, "ring %d: %s", i, strerror(errno));
}

static int hostile(int sock)
{
	struct tv_end e;
	struct tv_name me, peer;
	uint8_t *buf = malloc(4096);
	struct ibv_mr *mr;
	int bell;

	tv_open(&e);
	mr = ibv_reg_mr(e.pd, buf, 4096, 0);
	TV_MUST(buf && mr, "register");
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	peer = tv_trade(sock, &me);
	/* Connect second: the first end to connect gets its peer's QP only once that one connected back. */
	tv_hear(sock, 'c');
	tv_connect(&e, &peer);
	bell = find_doorbell();
	for (uint32_t id = 1; id <= ROUNDS; id++) {
		struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 1000 + id, .lkey = mr->lkey };
		struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED }, *bad;

		tv_hear(sock, 'r');
		spam(bell);
		tv_say(sock, 'd');
		tv_hear(sock, 's');
		for (uint32_t k = 0; k < sge.length; k++)
			buf[k] = tv_pattern(id, k);
		TV_MUST(ibv_post_send(e.qp, &wr, &bad) == 0, "send %u", id);
		spam(bell);	/* and more while the receiver wakes for it */
		CHECK(tv_wait(&e).status == IBV_WC_SUCCESS, "send %u completed", id);
	}
	tv_hear(sock, 'x');
	return 0;
}

int main(int argc, char **argv)
{
	struct ibv_comp_channel *ch;
	struct tv_end e;
	struct tv_name me, peer;
	uint8_t *buf = malloc(4096);
	struct ibv_mr *mr;
	struct ibv_wc wc;
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(hostile, &sock);
	tv_open_ch(&e, &ch);
	mr = ibv_reg_mr(e.pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	TV_MUST(buf && mr, "register");
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	tv_say(sock, 'c');
	for (uint32_t id = 1; id <= ROUNDS; id++) {
		tv_post_recv(&e, mr, id);
		TV_MUST(ibv_req_notify_cq(e.cq, 0) == 0, "arm");
		tv_say(sock, 'r');
		tv_hear(sock, 'd');	/* our thread drained thousands of rings, scanning with the CQ armed */
		CHECK(tv_no_event(ch), "round %u: rings without a message made an event", id);
		CHECK(ibv_poll_cq(e.cq, 1, &wc) == 0, "round %u: rings without a message made a completion", id);
		tv_say(sock, 's');
		tv_event(&e, ch, "the SEND among the rings");
		tv_got(&e, mr, id, 1000 + id);
		CHECK(ibv_poll_cq(e.cq, 1, &wc) == 0, "round %u: more than the one completion", id);
		ibv_ack_cq_events(e.cq, 1);
	}
	tv_say(sock, 'x');
	tv_join(pid);
	return t_shim_finish();
}
