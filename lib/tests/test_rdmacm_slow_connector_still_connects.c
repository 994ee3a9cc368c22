/* SPDX-License-Identifier: MIT */
/* Description: a connector whose program reads its events only 12 s after the listener's REP (librdmacm sends the RTU from rdma_get_cm_event), longer than the 10 s a silent peer is given, still gets connected: its CM answered the REP with an MRA (as the kernel's CM does for a reply queued to a program), which keeps the listener waiting; both ends get ESTABLISHED */
#include "rdmacmtest.h"

#define SLOW_MS	(TR_ANSWER_MS + 2000)

static int connector(int sock)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id = tr_connect_to(sock, &ch);
	struct ibv_cq *cq = tr_qp(id);

	tr_connect(id);
	usleep(SLOW_MS * 1000);	/* the REP is in; no RTU before the next rdma_get_cm_event */
	tr_ack(ch, RDMA_CM_EVENT_ESTABLISHED);
	tr_ack(ch, RDMA_CM_EVENT_DISCONNECTED);
	tr_drop_qp(id, cq);
	CHECK(rdma_destroy_id(id) == 0, "destroy the id: %s", strerror(errno));
	return 0;
}

int main(int argc, char **argv)
{
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1 };
	struct rdma_event_channel *ch;
	struct rdma_cm_id *l, *id;
	struct ibv_cq *cq;
	pid_t pid;
	int sock;

	(void)argc;
	tr_setup(argv);
	pid = tv_fork(connector, &sock);
	id = tr_listen_for_one(sock, &ch, &l);
	cq = tr_qp(id);
	TV_MUST(rdma_accept(id, &cp) == 0, "accept: %s", strerror(errno));
	tr_ack_within(ch, RDMA_CM_EVENT_ESTABLISHED, SLOW_MS + 5000);
	TV_MUST(rdma_disconnect(id) == 0, "disconnect: %s", strerror(errno));
	tr_ack(ch, RDMA_CM_EVENT_DISCONNECTED);
	tr_drop_qp(id, cq);
	CHECK(rdma_destroy_id(id) == 0 && rdma_destroy_id(l) == 0, "destroy the ids: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
	tv_join(pid);
	return t_shim_finish();
}
