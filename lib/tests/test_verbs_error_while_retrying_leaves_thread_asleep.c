/* SPDX-License-Identifier: MIT */
/* Description: a QP whose send waits for a peer that never connects (retried, as a NIC retries) and that the program then moves to ERR or RESET leaves the context's event thread asleep: under 50 wake-ups in 500 ms (its retry deadline outlived the move, and the thread woke every millisecond for ever) */
/* Channels: shm host-tcp */
#include <sys/resource.h>

#include "verbstest.h"

#define MAX_SWITCHES 50

static long switches(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_nvcsw + ru.ru_nivcsw;
}

/* A send to a QP number nobody has: it waits, retried; then the QP moves to st. */
static void stranded(enum ibv_qp_state st, const char *what)
{
	struct tv_end e;
	struct ibv_mr *mr;
	struct tv_name nobody = { .qpn = 0xfffff0, .lid = 0x102 };
	struct ibv_qp_attr a = { .qp_state = st };
	struct ibv_wc wc;
	long s0, used;

	tv_open(&e);
	mr = tv_region(&e, 64, IBV_ACCESS_LOCAL_WRITE);
	tv_connect(&e, &nobody);
	tv_send(&e, mr, mr->addr, 64, 1);
	CHECK(ibv_poll_cq(e.cq, 1, &wc) == 0, "%s: a completion before the move", what);
	TV_MUST(ibv_modify_qp(e.qp, &a, IBV_QP_STATE) == 0, "%s: %s", what, strerror(errno));
	while (ibv_poll_cq(e.cq, 1, &wc) > 0)
		;
	usleep(20000);
	s0 = switches();
	usleep(500000);
	used = switches() - s0;
	CHECK(used < MAX_SWITCHES, "%s: %ld context switches in 500 ms of nothing", what, used);
	ibv_destroy_qp(e.qp);
	ibv_destroy_cq(e.cq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(e.pd);
	ibv_close_device(e.ctx);
}

int main(int argc, char **argv)
{
	(void)argc;
	tv_setup(argv);
	stranded(IBV_QPS_ERR, "moved to ERR");
	stranded(IBV_QPS_RESET, "moved to RESET");
	return t_exit_code();
}
