/* SPDX-License-Identifier: MIT */
/* Description: a connector process killed between the listener's REP and its RTU gives the listener REJECTED with status 28 (consumer defined) at once, as the REJ the dying process's kernel CM sends when it destroys the id, not CONNECT_ERROR */
#include "rdmacmtest.h"

static int connector(int sock)
{
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1, .retry_count = 7 };
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id = tr_connect_to(sock, &ch);

	TV_MUST(rdma_connect(id, &cp) == 0, "connect: %s", strerror(errno));
	pause();		/* reads no event, so sends no RTU; killed */
	return 1;
}

int main(int argc, char **argv)
{
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1 };
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *l, *id;
	pid_t pid;
	int sock;

	(void)argc;
	tr_setup(argv);
	pid = tv_fork(connector, &sock);
	ch = rdma_create_event_channel();
	TV_MUST(ch, "event channel: %s", strerror(errno));
	l = tr_listen(ch, sock);
	ev = tr_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	id = ev->id;
	rdma_ack_cm_event(ev);
	TV_MUST(rdma_accept(id, &cp) == 0, "accept: %s", strerror(errno));
	tr_kill(pid);
	ev = tr_event(ch, RDMA_CM_EVENT_REJECTED);
	CHECK(ev->status == 28, "REJECTED with status %d, want 28 (consumer defined)", ev->status);
	rdma_ack_cm_event(ev);
	CHECK(rdma_destroy_id(id) == 0 && rdma_destroy_id(l) == 0, "destroy the ids: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
	return t_shim_finish();
}
