/* SPDX-License-Identifier: MIT */
/* Description: across hosts, a READ that comes while our next request's frame could not start (the socket full at its first byte) is answered once the socket drains, and the requests go on after it (the unstarted frame held the connection as if written in part: nothing more was written, and the event thread spun) */
/* Channels: host-tcp */
#include <poll.h>
#include <sys/socket.h>

#include "verbstest.h"

#define NREQ	8000	/* empty WRITEs, 40-byte frames never written in part: 320 KB, more than the connection holds */

/* Bytes from fd within ms: 1 when all came. */
static int get(int fd, void *to, size_t n, int ms)
{
	for (size_t got = 0; got < n;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, ms) != 1 || (r = recv(fd, (uint8_t *)to + got, n - got, 0)) <= 0)
			return 0;
		got += (size_t)r;
	}
	return 1;
}

static int peer_side(int sock)
{
	static uint8_t payload[1 << 17];
	struct tv_end e;
	struct tv_name me, peer;
	struct ibv_mr *mr;
	uint8_t h[FF_VW_HDR] = { 0 };
	uint64_t n = 4096;
	int fd, writes = 0, answered = 0;

	tv_open(&e);
	mr = tv_region(&e, 64, IBV_ACCESS_LOCAL_WRITE);
	strcpy(mr->addr, "hi");
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	fd = tv_take_wire(&e, mr);
	tv_say(sock, 'g');
	usleep(300000);	/* we read nothing: its WRITEs fill the connection */
	h[FF_VW_OP] = FF_VW_READ;
	memcpy(h + FF_VW_RKEY, &peer.rkey, 4);
	memcpy(h + FF_VW_RADDR, &peer.addr, 8);
	memcpy(h + FF_VW_ARG1, &n, 8);
	TV_MUST(write(fd, h, sizeof(h)) == sizeof(h), "write the READ");
	usleep(100000);	/* it reads it, its next WRITE's frame not started */
	while (get(fd, h, sizeof(h), 2000)) {
		uint32_t len;

		memcpy(&len, h + FF_VW_LEN, 4);
		TV_MUST(len <= sizeof(payload) && get(fd, payload, len, 2000), "a frame's payload");
		if (h[FF_VW_OP] == FF_VW_READ_RESP)
			answered = 1;
		else if (h[FF_VW_OP] == FF_VW_WRITE)
			writes++;
		if (answered && writes == NREQ)
			break;
	}
	CHECK(answered && writes == NREQ, "the READ answered: %d; WRITEs read: %d of %d", answered, writes, NREQ);
	tv_say(sock, 'd');
	return 0;
}

int main(int argc, char **argv)
{
	struct tv_end e;
	struct tv_name me, peer;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	int sock, small = 4096;
	char c;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(peer_side, &sock);
	tv_open_deep(&e, NREQ + 1, 4);
	mr = tv_region(&e, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102, .rkey = mr->rkey, .addr = (uintptr_t)mr->addr };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	tv_hear(sock, 'g');
	TV_MUST(setsockopt(tv_wire_await(&e), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) == 0, "SO_SNDBUF");
	for (uint32_t i = 0; i < NREQ; i++) {
		struct ibv_send_wr wr = { .wr_id = i, .opcode = IBV_WR_RDMA_WRITE }, *bad;

		TV_MUST(ibv_post_send(e.qp, &wr, &bad) == 0, "post WRITE %u: %s", i, strerror(errno));
	}
	/* A program that polls until the peer has seen what it wants. */
	for (;;) {
		struct pollfd p = { .fd = sock, .events = POLLIN };

		ibv_poll_cq(e.cq, 1, &wc);
		if (poll(&p, 1, 0) == 1)
			break;
	}
	TV_MUST(read(sock, &c, 1) == 1 && c == 'd', "the peer's end");
	tv_join(pid);
	return t_exit_code();
}
