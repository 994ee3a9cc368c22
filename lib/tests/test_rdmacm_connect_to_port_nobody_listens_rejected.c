/* SPDX-License-Identifier: MIT */
/* Description: rdma_connect to a port nobody listens on: REJECTED with status 8 (the IB CM's invalid service ID, as a kernel's CM answers a REQ for no listener), at once, not a hang; the id can be destroyed after */
#include "rdmacmtest.h"

/* The "listener": binds a port, tells it, and closes it before anyone connects. */
static int nobody(int sock)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct rdma_cm_id *id;
	uint16_t port;

	TV_MUST(ch && rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0 &&
		rdma_bind_addr(id, (struct sockaddr *)&a) == 0, "bind: %s", strerror(errno));
	port = rdma_get_src_port(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	TV_MUST(write(sock, &port, 2) == 2, "tell the port");
	return 0;
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	struct ibv_cq *cq;
	struct rdma_cm_id *id;
	int64_t start;
	pid_t pid;
	int sock;

	(void)argc;
	tr_setup(argv);
	pid = tv_fork(nobody, &sock);
	tv_join(pid);
	id = tr_connect_to(sock, &ch);
	cq = tr_qp(id);
	start = t_ms();
	tr_connect(id);
	ev = tr_event(ch, RDMA_CM_EVENT_REJECTED);
	CHECK(ev->status == 8, "REJECTED with status %d, want 8", ev->status);
	CHECK(t_ms() - start < 2000, "the reject took %lld ms", (long long)(t_ms() - start));
	rdma_ack_cm_event(ev);
	tr_drop_qp(id, cq);
	CHECK(rdma_destroy_id(id) == 0, "destroy the id: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
	return t_shim_finish();
}
