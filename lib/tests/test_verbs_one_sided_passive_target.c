/* SPDX-License-Identifier: MIT */
/* Description: RDMA WRITE, READ, fetch-and-add and compare-and-swap act on the other process's registered memory while it makes no verbs call (it waits on a socket), on a buffer that is neither page aligned nor page sized (malloc) and one on its stack; the target's own data and stack stay intact around them; WRITE with immediate consumes a posted receive after the data is there */
/* Channels: shm host-tcp */
#include "verbstest.h"

#define LEN 10000	/* crosses pages, starts mid-page */

/* What the initiator WRITEs at i. */
static uint8_t written(int i)
{
	return (uint8_t)(255 - tv_pattern(2, (size_t)i));
}

/* The target: registers, tells, then only waits; checks what arrived. */
static int target(int sock)
{
	volatile uint64_t guard_lo = 0x1111;
	uint64_t counters[2] __attribute__((aligned(8))) = { 40, 7 };
	volatile uint64_t guard_hi = 0x2222;
	struct tv_end e;
	struct tv_name me, peer;
	uint8_t *heap = malloc(LEN + 100), *data = heap + 37;
	struct ibv_mr *mh, *ms;
	struct ibv_sge sge;
	struct ibv_recv_wr rwr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1 }, *bad;
	struct ibv_wc wc;
	char c;

	for (int i = 0; i < LEN; i++)
		data[i] = tv_pattern(1, i);
	tv_open(&e);
	mh = ibv_reg_mr(e.pd, data, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			IBV_ACCESS_REMOTE_READ);
	ms = ibv_reg_mr(e.pd, counters, sizeof(counters), IBV_ACCESS_LOCAL_WRITE |
			IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_REMOTE_READ);
	TV_MUST(mh && ms, "register heap and stack buffers: %s", strerror(errno));
	/* Registering moved the pages: what was in them must still be there. */
	for (int i = 0; i < LEN; i++)
		if (data[i] != tv_pattern(1, i)) {
			CHECK(0, "byte %d changed by ibv_reg_mr", i);
			break;
		}
	CHECK(counters[0] == 40 && counters[1] == 7 && guard_lo == 0x1111 && guard_hi == 0x2222,
	      "the stack around a registered buffer changed");
	/* Outside mh: WRITE with immediate must take the receive without touching its buffer. */
	sge = (struct ibv_sge){ .addr = (uintptr_t)heap, .length = 4, .lkey = mh->lkey };
	CHECK(ibv_post_recv(e.qp, &rwr, &bad) == 0, "post the receive WRITE with immediate takes");
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102, .rkey = mh->rkey, .addr = (uintptr_t)data };
	peer = tv_trade(sock, &me);
	me = (struct tv_name){ .rkey = ms->rkey, .addr = (uintptr_t)counters };
	TV_MUST(write(sock, &me, sizeof(me)) == sizeof(me), "send the stack region");
	tv_connect(&e, &peer);
	/* No verbs call until the initiator is done. */
	TV_MUST(read(sock, &c, 1) == 1, "wait for the initiator");
	for (int i = 16; i < LEN; i++)	/* the first 16: WRITE with immediate's, below */
		if (data[i] != written(i)) {
			CHECK(0, "byte %d of the WRITE is %#x, want %#x", i, data[i], written(i));
			break;
		}
	CHECK(counters[0] == 40 + 5 && counters[1] == 99, "atomics left %llu, %llu; want 45, 99",
	      (unsigned long long)counters[0], (unsigned long long)counters[1]);
	CHECK(guard_lo == 0x1111 && guard_hi == 0x2222, "the stack around the atomics changed");
	wc = tv_wait(&e);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && wc.wr_id == 9 &&
	      (wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == 0x5151 && wc.byte_len == 16,
	      "WRITE with immediate: status %d opcode %d len %u imm %#x", wc.status, wc.opcode,
	      wc.byte_len, ntohl(wc.imm_data));
	CHECK(memcmp(data, "immediate-after!", 16) == 0, "the WRITE with immediate's data is not there");
	CHECK(write(sock, "k", 1) == 1, "say checked");
	return 0;
}

static void post(struct tv_end *e, struct ibv_send_wr *wr, enum ibv_wc_opcode want)
{
	struct ibv_send_wr *bad;
	struct ibv_wc wc;

	wr->send_flags = IBV_SEND_SIGNALED;
	TV_MUST(ibv_post_send(e->qp, wr, &bad) == 0, "post opcode %d: %s", wr->opcode, strerror(errno));
	wc = tv_wait(e);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == want, "opcode %d: status %d (%s), wc opcode %d",
	      wr->opcode, wc.status, ibv_wc_status_str(wc.status), wc.opcode);
}

int main(int argc, char **argv)
{
	struct tv_end e;
	struct tv_name me, heap, stack;
	uint8_t *buf = malloc(LEN);
	uint64_t old = 0;
	struct ibv_mr *mr, *mo;
	struct ibv_sge sge;
	struct ibv_send_wr wr;
	int sock;
	pid_t pid;
	char c;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(target, &sock);
	tv_open(&e);
	mr = ibv_reg_mr(e.pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE);
	mo = ibv_reg_mr(e.pd, &old, sizeof(old), IBV_ACCESS_LOCAL_WRITE);
	TV_MUST(buf && mr && mo, "register: %s", strerror(errno));
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	heap = tv_trade(sock, &me);
	TV_MUST(read(sock, &stack, sizeof(stack)) == sizeof(stack), "the stack region's name");
	tv_connect(&e, &heap);

	/* READ what the target wrote before registering. */
	sge = (struct ibv_sge){ .addr = (uintptr_t)buf, .length = LEN, .lkey = mr->lkey };
	wr = (struct ibv_send_wr){ .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
				   .wr.rdma = { .remote_addr = heap.addr, .rkey = heap.rkey } };
	post(&e, &wr, IBV_WC_RDMA_READ);
	for (int i = 0; i < LEN; i++)
		if (buf[i] != tv_pattern(1, i)) {
			CHECK(0, "READ byte %d is %#x, want %#x", i, buf[i], tv_pattern(1, i));
			break;
		}
	/* WRITE over all of it. */
	for (int i = 0; i < LEN; i++)
		buf[i] = written(i);
	wr.opcode = IBV_WR_RDMA_WRITE;
	post(&e, &wr, IBV_WC_RDMA_WRITE);
	/* Atomics on the target's stack: 40 + 5, then 7 -> 99 (and a compare that misses). */
	sge = (struct ibv_sge){ .addr = (uintptr_t)&old, .length = 8, .lkey = mo->lkey };
	wr = (struct ibv_send_wr){ .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				   .wr.atomic = { .remote_addr = stack.addr, .rkey = stack.rkey, .compare_add = 5 } };
	post(&e, &wr, IBV_WC_FETCH_ADD);
	CHECK(old == 40, "fetch-and-add returned %llu, want 40", (unsigned long long)old);
	wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	wr.wr.atomic = (typeof(wr.wr.atomic)){ .remote_addr = stack.addr + 8, .rkey = stack.rkey,
					       .compare_add = 8, .swap = 1000 };
	post(&e, &wr, IBV_WC_COMP_SWAP);
	CHECK(old == 7, "a missed compare-and-swap returned %llu, want 7", (unsigned long long)old);
	wr.wr.atomic.compare_add = 7;
	wr.wr.atomic.swap = 99;
	post(&e, &wr, IBV_WC_COMP_SWAP);
	CHECK(old == 7, "compare-and-swap returned %llu, want 7", (unsigned long long)old);
	/* Each region only for what it allows: the stack one has no remote write. */
	sge = (struct ibv_sge){ .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
	memcpy(buf, "immediate-after!", 16);
	sge.length = 16;
	wr = (struct ibv_send_wr){ .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
				   .imm_data = htonl(0x5151),
				   .wr.rdma = { .remote_addr = heap.addr, .rkey = heap.rkey } };
	post(&e, &wr, IBV_WC_RDMA_WRITE);
	CHECK(write(sock, "d", 1) == 1, "say done");
	CHECK(read(sock, &c, 1) == 1 && c == 'k', "the target checked");
	tv_join(pid);
	return t_shim_finish();
}
