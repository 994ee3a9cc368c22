/* SPDX-License-Identifier: MIT */
/* Description: ibv_modify_qp to RESET succeeds when the agent refuses the new ring (as one restarted since, which knows no such QP), as a NIC's reset never fails: the QP is in RESET, and what its old peer sends then fails with a retry error, as to a NIC's QP in RESET (the reset failed with EPERM) */
#include "verbstest.h"

#define LEN 64

static int receiver(int sock)
{
	struct tv_end e;
	struct ibv_mr *mr;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET }, q;
	struct ibv_qp_init_attr qi;

	tv_open(&e);
	mr = tv_region(&e, LEN, IBV_ACCESS_LOCAL_WRITE);
	tv_post_recv(&e, mr, 1);
	tv_link(sock, &e);
	tv_got(&e, mr, 1, LEN);
	CHECK(ibv_modify_qp(e.qp, &a, IBV_QP_STATE) == 0, "RESET with the agent refusing: %s", strerror(errno));
	CHECK(ibv_query_qp(e.qp, &q, IBV_QP_STATE, &qi) == 0 && q.qp_state == IBV_QPS_RESET,
	      "the QP's state after the reset: %d", q.qp_state);
	tv_say(sock, 'r');
	tv_hear(sock, 'd');
	return 0;
}

int main(int argc, char **argv)
{
	struct tv_end e;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	int sock;
	pid_t pid;

	(void)argc;
	setenv("FF_TEST_REFUSE_RESET", "1", 1);
	tv_setup(argv);
	pid = tv_fork(receiver, &sock);
	tv_open(&e);
	mr = tv_region(&e, LEN, IBV_ACCESS_LOCAL_WRITE);
	tv_link(sock, &e);
	tv_send(&e, mr, mr->addr, LEN, 1);
	TV_MUST(tv_wait(&e).status == IBV_WC_SUCCESS, "the first message");
	tv_hear(sock, 'r');
	tv_send(&e, mr, mr->addr, LEN, 2);
	wc = tv_wait(&e);
	CHECK(wc.status == IBV_WC_RETRY_EXC_ERR, "a send to the QP in RESET: status %d, want RETRY_EXC_ERR (%d)",
	      wc.status, IBV_WC_RETRY_EXC_ERR);
	tv_say(sock, 'd');
	tv_join(pid);
	return t_exit_code();
}
