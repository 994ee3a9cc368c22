/* SPDX-License-Identifier: MIT */
/* Description: across hosts, WRITEs of 64 KiB queued behind a full socket, each written in part as a slow reader drains it: a READ that comes meanwhile is answered only between whole frames, and every WRITE's frame arrives whole, in order, with its bytes (the peer is a raw connection that reads nothing for a while, then reads slowly and checks each frame) */
/* Channels: host-tcp */
#include <poll.h>
#include <sys/socket.h>

#include "verbstest.h"

#define LEN	(64u << 10)
#define N	64	/* 4 MiB: far more than the connection holds while the peer reads nothing */
#define RLEN	4096

/*
 * Bytes from fd within ms: 1 when all came. Slowly (8 KiB at a time, a
 * pause between): the sender's socket drains a little at a time, so it
 * writes its batches in part again and again.
 */
static int get(int fd, void *to, size_t n, int ms)
{
	for (size_t got = 0; got < n;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, ms) != 1 ||
		    (r = recv(fd, (uint8_t *)to + got, n - got < 8192 ? n - got : 8192, 0)) <= 0)
			return 0;
		got += (size_t)r;
		usleep(20);
	}
	return 1;
}

static int peer_side(int sock)
{
	static uint8_t payload[LEN];
	struct tv_end e;
	struct tv_name me, peer;
	struct ibv_mr *mr;
	uint8_t h[FF_VW_HDR] = { 0 };
	uint64_t n = RLEN, raddr;
	uint32_t len, rkey;
	int fd, writes = 0, answered = 0, asked = 0;

	tv_open(&e);
	mr = tv_region(&e, 64, IBV_ACCESS_LOCAL_WRITE);
	strcpy(mr->addr, "hi");
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102, .rkey = 0x77, .addr = 0x10000 };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	fd = tv_take_wire(&e, mr);
	tv_say(sock, 'g');
	/*
	 * We read nothing a while: its WRITEs fill the connection. Not for
	 * long: our QP is gone (the device closed), and its retries would end.
	 */
	usleep(50000);
	while (writes < N || !answered) {
		/* Once it writes batches in part as we drain it slowly: a READ, answered meanwhile. */
		if (writes == 8 && !asked) {
			memset(h, 0, sizeof(h));
			h[FF_VW_OP] = FF_VW_READ;
			memcpy(h + FF_VW_RKEY, &peer.rkey, 4);
			memcpy(h + FF_VW_RADDR, &peer.addr, 8);
			memcpy(h + FF_VW_ARG1, &n, 8);
			TV_MUST(write(fd, h, sizeof(h)) == sizeof(h), "write the READ");
			asked = 1;
		}
		if (!get(fd, h, sizeof(h), 2000)) {
			CHECK(0, "no frame within 2 s after %d WRITEs (answered: %d)", writes, answered);
			break;
		}
		memcpy(&len, h + FF_VW_LEN, 4);
		memcpy(&rkey, h + FF_VW_RKEY, 4);
		memcpy(&raddr, h + FF_VW_RADDR, 8);
		if (h[FF_VW_OP] == FF_VW_READ_RESP && len == RLEN && !answered) {
			TV_MUST(get(fd, payload, len, 2000), "the READ's answer");
			answered = tv_intact(payload, N, RLEN, "the READ's answer");
			continue;
		}
		if (h[FF_VW_OP] != FF_VW_WRITE || len != LEN || rkey != 0x77 || raddr != 0x10000 + (uint64_t)writes * LEN) {
			CHECK(0, "frame after %d WRITEs: op %u len %u rkey %#x raddr %#llx: not WRITE %d",
			      writes, h[FF_VW_OP], len, rkey, (unsigned long long)raddr, writes);
			break;
		}
		TV_MUST(get(fd, payload, len, 2000), "WRITE %d's payload", writes);
		if (!tv_intact(payload, (uint32_t)writes, LEN, "a WRITE's bytes"))
			break;
		writes++;
	}
	tv_say(sock, 'd');
	return 0;
}

int main(int argc, char **argv)
{
	struct tv_end e;
	struct tv_name me, peer;
	struct ibv_mr *src, *rd;
	struct ibv_wc wc;
	int sock, small = 4096;
	char c;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(peer_side, &sock);
	tv_open_deep(&e, N, 4);
	src = tv_region(&e, (size_t)N * LEN, 0);
	for (size_t i = 0; i < N; i++)
		for (size_t k = 0; k < LEN; k++)
			((uint8_t *)src->addr)[i * LEN + k] = tv_pattern((uint32_t)i, k);
	rd = tv_region(&e, RLEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	for (size_t k = 0; k < RLEN; k++)
		((uint8_t *)rd->addr)[k] = tv_pattern(N, k);
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102, .rkey = rd->rkey, .addr = (uintptr_t)rd->addr };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	tv_hear(sock, 'g');
	TV_MUST(setsockopt(tv_wire_await(&e), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) == 0, "SO_SNDBUF");
	for (uint32_t i = 0; i < N; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)src->addr + (size_t)i * LEN, .length = LEN, .lkey = src->lkey };
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					  .wr.rdma = { .remote_addr = 0x10000 + (uint64_t)i * LEN, .rkey = 0x77 } }, *bad;

		TV_MUST(ibv_post_send(e.qp, &wr, &bad) == 0, "post WRITE %u: %s", i, strerror(errno));
	}
	/* A program that polls until the peer has checked what came. */
	for (;;) {
		struct pollfd p = { .fd = sock, .events = POLLIN };

		if (ibv_poll_cq(e.cq, 1, &wc) == 1)
			CHECK(0, "WRITE %llu completed with status %d", (unsigned long long)wc.wr_id, wc.status);
		if (poll(&p, 1, 0) == 1)
			break;
	}
	TV_MUST(read(sock, &c, 1) == 1 && c == 'd', "the peer's end");
	tv_join(pid);
	return t_exit_code();
}
