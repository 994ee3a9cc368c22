/* SPDX-License-Identifier: MIT */
/* Description: a connector process killed between the listener's REP and its RTU gives the listener REJECTED with status 28 (consumer defined) at once, as the REJ the dying process's kernel CM sends when it destroys the id, not CONNECT_ERROR */
#include "rdmacmtest.h"

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
	pid = tv_fork(tr_silent_connector, &sock);
	id = tr_listen_for_one(sock, &ch, &l);
	TV_MUST(rdma_accept(id, &cp) == 0, "accept: %s", strerror(errno));
	tr_kill(pid);
	ev = tr_event(ch, RDMA_CM_EVENT_REJECTED);
	CHECK(ev->status == 28, "REJECTED with status %d, want 28 (consumer defined)", ev->status);
	rdma_ack_cm_event(ev);
	CHECK(rdma_destroy_id(id) == 0 && rdma_destroy_id(l) == 0, "destroy the ids: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
	return t_shim_finish();
}
