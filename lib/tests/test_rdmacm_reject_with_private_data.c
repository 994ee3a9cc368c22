/* SPDX-License-Identifier: MIT */
/* Description: a listener that rejects a connect request with private data: the connector gets REJECTED, status 28 (the IB CM's consumer-defined reason), with that private data; the listener gets no further event for the rejected id */
#include "rdmacmtest.h"

static int listener(int sock)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *l, *id = tr_listen_for_one(sock, &ch, &l);
	struct pollfd p;

	TV_MUST(rdma_reject(id, "go away", 8) == 0, "reject: %s", strerror(errno));
	tv_hear(sock, 'r');
	p = (struct pollfd){ .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 200) == 0, "an event after the reject");
	CHECK(rdma_destroy_id(id) == 0 && rdma_destroy_id(l) == 0, "destroy the ids: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
	return 0;
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	struct rdma_conn_param cp = { .private_data = "please", .private_data_len = 7,
				      .responder_resources = 1, .initiator_depth = 1, .retry_count = 7 };
	struct rdma_cm_event *ev;
	struct ibv_cq *cq;
	struct rdma_cm_id *id;
	pid_t pid;
	int sock;

	(void)argc;
	tr_setup(argv);
	pid = tv_fork(listener, &sock);
	id = tr_connect_to(sock, &ch);
	cq = tr_qp(id);
	TV_MUST(rdma_connect(id, &cp) == 0, "connect: %s", strerror(errno));
	ev = tr_event(ch, RDMA_CM_EVENT_REJECTED);
	CHECK(ev->status == 28, "REJECTED with status %d, want 28", ev->status);
	CHECK(ev->param.conn.private_data_len >= 8 && !memcmp(ev->param.conn.private_data, "go away", 8),
	      "the reject's private data (%u bytes) is not the listener's", ev->param.conn.private_data_len);
	rdma_ack_cm_event(ev);
	tv_say(sock, 'r');
	tr_drop_qp(id, cq);
	CHECK(rdma_destroy_id(id) == 0, "destroy the id: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
	tv_join(pid);
	return t_shim_finish();
}
