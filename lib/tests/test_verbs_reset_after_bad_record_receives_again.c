/* SPDX-License-Identifier: MIT */
/* Description: a QP whose peer wrote a record that makes no sense goes to error; taken back to RESET and connected again (both ends), it takes the next message as any (it stayed deaf: the broken mark outlived the reset) */
#include "verbstest.h"

#define LEN 64

static int receiver(int sock)
{
	struct tv_end e;
	struct ibv_mr *mr;
	struct tv_name peer;
	struct ibv_wc wc;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };

	tv_open(&e);
	mr = tv_region(&e, LEN, IBV_ACCESS_LOCAL_WRITE);
	tv_post_recv(&e, mr, 1);
	tv_post_recv(&e, mr, 2);
	peer = tv_link(sock, &e);
	tv_say(sock, 'l');	/* in RTS: the bad record must not meet the QP between RTR and RTS (modify to RTS would fail) */
	tv_hear(sock, 'g');
	wc = tv_wait(&e);
	CHECK(wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS, "the good message: wr_id %llu status %d",
	      (unsigned long long)wc.wr_id, wc.status);
	wc = tv_wait(&e);
	CHECK(wc.wr_id == 2 && wc.status != IBV_WC_SUCCESS, "after the bad record: wr_id %llu status %d",
	      (unsigned long long)wc.wr_id, wc.status);
	TV_MUST(ibv_modify_qp(e.qp, &a, IBV_QP_STATE) == 0, "RESET: %s", strerror(errno));
	tv_say(sock, 'r');
	tv_hear(sock, 'r');
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT, .port_num = 1 };
	TV_MUST(ibv_modify_qp(e.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
		"INIT again");
	tv_connect(&e, &peer);
	tv_post_recv(&e, mr, 3);
	tv_say(sock, 'c');
	tv_got(&e, mr, 3, LEN);
	tv_say(sock, 'd');
	return 0;
}

int main(int argc, char **argv)
{
	struct tv_end e;
	struct ibv_mr *mr;
	struct tv_name peer;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };
	uint8_t *mem, *ring;
	uint64_t prod;
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(receiver, &sock);
	tv_open(&e);
	mr = tv_region(&e, LEN, IBV_ACCESS_LOCAL_WRITE);
	peer = tv_link(sock, &e);
	tv_send(&e, mr, mr->addr, LEN, 1);
	TV_MUST(tv_wait(&e).status == IBV_WC_SUCCESS, "the good message");
	tv_hear(sock, 'l');
	/* By hand into the receiver's ring: a SEND piece that is not a message's first. */
	mem = tv_written_ring();
	TV_MUST(mem, "find the receiver's ring");
	ring = mem + FF_VQP_HDR_SIZE;
	prod = *(uint64_t *)(mem + FF_VQP_OFF_PROD);
	tv_rec(ring + prod, 16, FF_VQP_OP_SEND, FF_VQP_LAST, 16);
	memset(ring + prod + 16, 0x41, 16);
	__atomic_store_n((uint64_t *)(mem + FF_VQP_OFF_PROD), prod + 32, __ATOMIC_RELEASE);
	tv_say(sock, 'g');
	tv_hear(sock, 'r');
	TV_MUST(ibv_modify_qp(e.qp, &a, IBV_QP_STATE) == 0, "RESET: %s", strerror(errno));
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_INIT, .port_num = 1 };
	TV_MUST(ibv_modify_qp(e.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
		"INIT again");
	tv_say(sock, 'r');
	tv_connect(&e, &peer);
	tv_hear(sock, 'c');
	tv_send(&e, mr, mr->addr, LEN, 3);
	TV_MUST(tv_wait(&e).status == IBV_WC_SUCCESS, "the message after the reconnect");
	tv_hear(sock, 'd');
	tv_join(pid);
	return t_exit_code();
}
