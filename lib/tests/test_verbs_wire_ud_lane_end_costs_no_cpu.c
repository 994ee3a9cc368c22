/* SPDX-License-Identifier: MIT */
/* Description: a UD lane from another host that ends while a datagram of it waits for a receive, the receive CQ armed, costs no CPU: the event thread stops watching a connection whose end it has read (it spun at 100% on the readable end) */
/* Channels: host-tcp */
#include <sys/resource.h>

#include "verbstest.h"

static double cpu(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

int main(int argc, char **argv)
{
	struct ibv_comp_channel *ch;
	struct tv_end e, s;
	static uint8_t buf[40 + 64];
	struct ibv_ah *ah;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	double t0, t1;

	(void)argc;
	tv_setup(argv);
	tv_device(&e, &ch);
	tv_ud_qp(&e);
	s = e;
	tv_ud_qp(&s);	/* the sender: another UD QP on the same CQ */
	mr = ibv_reg_mr(e.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	ah = tv_ah(&e, 0);
	CHECK(tv_send_dgram(&e, s.qp, mr, ah, e.qp->qp_num, TV_QKEY, 64, 3) == IBV_WC_SUCCESS, "the datagram");
	usleep(100000);
	CHECK(ibv_poll_cq(e.cq, 1, &wc) == 0, "a completion before any receive");	/* takes the lane in; the datagram waits */
	TV_MUST(ibv_req_notify_cq(e.cq, 0) == 0, "arm the CQ");
	TV_MUST(ibv_destroy_qp(s.qp) == 0, "destroy the sender's QP: its lane ends");
	usleep(100000);	/* the end arrives */
	t0 = cpu();
	usleep(1000000);
	t1 = cpu();
	CHECK(t1 - t0 < 0.2, "%.2f s of CPU in 1 s asleep", t1 - t0);
	return t_exit_code();
}
