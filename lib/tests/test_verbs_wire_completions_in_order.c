/* SPDX-License-Identifier: MIT */
/* Description: across hosts (the fake agent hands a TCP connection), a READ's answer comes later than the requests posted after it are written, yet every completion comes in the order posted, as on an RC link: READ, then a fenced WRITE (it waits for the READ's answer, so the READ does not see it), SEND, atomic, READ (which sees the WRITE); the bytes are right, and a passive target serves all of them */
/* Channels: host-tcp */
#include "verbstest.h"

#define LEN (256 * 1024)	/* several frames' worth: the READ's answer takes a while */

static int target(int sock)
{
	struct tv_end e;
	struct ibv_mr *mr, *rx;
	struct tv_name me, peer;
	uint8_t *data;
	uint64_t *counter;
	char c;

	tv_open(&e);
	mr = tv_region(&e, LEN + 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
		       IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	rx = tv_region(&e, 64, IBV_ACCESS_LOCAL_WRITE);
	data = mr->addr;
	for (size_t i = 0; i < LEN; i++)
		data[i] = tv_pattern(7, i);
	counter = (uint64_t *)(data + LEN);
	*counter = 100;
	tv_post_recv(&e, rx, 50);
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102, .rkey = mr->rkey, .addr = (uintptr_t)data };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	/* Passive until told: the initiator's one-sided requests are served by the provider alone. */
	TV_MUST(read(sock, &c, 1) == 1, "wait for the initiator");
	CHECK(memcmp(data + 1000, "written", 7) == 0, "the WRITE's bytes are not there");
	CHECK(*counter == 105, "fetch-and-add left %llu, want 105", (unsigned long long)*counter);
	{
		struct ibv_wc wc = tv_wait(&e);

		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 50 && wc.byte_len == 5 &&
		      !memcmp(rx->addr, "hello", 5), "the SEND: status %d wr %llu len %u", wc.status,
		      (unsigned long long)wc.wr_id, wc.byte_len);
	}
	tv_say(sock, 'k');
	return 0;
}

int main(int argc, char **argv)
{
	struct tv_end e;
	struct tv_name me, peer;
	struct ibv_mr *mr;
	uint8_t *buf;
	struct ibv_sge s_read = { 0 }, s_write, s_send, s_fadd, s_read2;
	struct ibv_send_wr w[5], *bad;
	uint64_t want[5] = { 1, 2, 3, 4, 5 };
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(target, &sock);
	tv_open(&e);
	mr = tv_region(&e, 2 * LEN + 4096, IBV_ACCESS_LOCAL_WRITE);
	buf = mr->addr;
	memset(buf, 0, 2 * LEN + 4096);
	memcpy(buf + 2 * LEN, "written", 7);
	memcpy(buf + 2 * LEN + 64, "hello", 5);
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);

	s_read = (struct ibv_sge){ .addr = (uintptr_t)buf, .length = LEN, .lkey = mr->lkey };
	s_write = (struct ibv_sge){ .addr = (uintptr_t)buf + 2 * LEN, .length = 7, .lkey = mr->lkey };
	s_send = (struct ibv_sge){ .addr = (uintptr_t)buf + 2 * LEN + 64, .length = 5, .lkey = mr->lkey };
	s_fadd = (struct ibv_sge){ .addr = (uintptr_t)buf + 2 * LEN + 128, .length = 8, .lkey = mr->lkey };
	s_read2 = (struct ibv_sge){ .addr = (uintptr_t)buf + LEN, .length = 64, .lkey = mr->lkey };
	w[0] = (struct ibv_send_wr){ .wr_id = 1, .sg_list = &s_read, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
				     .wr.rdma = { .remote_addr = peer.addr, .rkey = peer.rkey } };
	w[1] = (struct ibv_send_wr){ .wr_id = 2, .sg_list = &s_write, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				     .wr.rdma = { .remote_addr = peer.addr + 1000, .rkey = peer.rkey } };
	w[2] = (struct ibv_send_wr){ .wr_id = 3, .sg_list = &s_send, .num_sge = 1, .opcode = IBV_WR_SEND };
	w[3] = (struct ibv_send_wr){ .wr_id = 4, .sg_list = &s_fadd, .num_sge = 1,
				     .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				     .wr.atomic = { .remote_addr = peer.addr + LEN, .rkey = peer.rkey, .compare_add = 5 } };
	w[4] = (struct ibv_send_wr){ .wr_id = 5, .sg_list = &s_read2, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
				     .wr.rdma = { .remote_addr = peer.addr + 1000, .rkey = peer.rkey } };
	for (int i = 0; i < 5; i++) {
		w[i].send_flags = IBV_SEND_SIGNALED | (i == 1 ? IBV_SEND_FENCE : 0);
		w[i].next = i < 4 ? &w[i + 1] : NULL;
	}
	TV_MUST(ibv_post_send(e.qp, w, &bad) == 0, "post the five requests");
	for (int i = 0; i < 5; i++) {
		struct ibv_wc wc = tv_wait(&e);

		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == want[i], "completion %d: wr %llu status %d, want wr %llu",
		      i, (unsigned long long)wc.wr_id, wc.status, (unsigned long long)want[i]);
	}
	/* The WRITE was fenced: it went only once the READ's answer was in (IB: unfenced, it need not). */
	tv_intact(buf, 7, LEN, "the READ posted before the WRITE");
	CHECK(*(uint64_t *)(buf + 2 * LEN + 128) == 100, "fetch-and-add gave %llu, want 100",
	      (unsigned long long)*(uint64_t *)(buf + 2 * LEN + 128));
	CHECK(memcmp(buf + LEN, "written", 7) == 0, "the second READ does not see the WRITE before it");
	tv_say(sock, 'g');
	tv_hear(sock, 'k');
	tv_join(pid);
	return t_exit_code();
}
