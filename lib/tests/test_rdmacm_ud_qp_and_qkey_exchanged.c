/* SPDX-License-Identifier: MIT */
/* Description: RDMA_PS_UDP ids (as udaddy): the connect request carries the connector's private data, the accept answers the listener's QP number and Q_Key (RDMA_UDP_QKEY) in the connector's ESTABLISHED, whose address handle attributes reach the listener: a datagram sent through them arrives, from the connector's QP; the listener gets no event of its own after accepting */
#include "rdmacmtest.h"

static struct ibv_cq *ud_qp(struct rdma_cm_id *id)
{
	struct ibv_cq *cq = ibv_create_cq(id->verbs, 64, NULL, NULL, 0);
	struct ibv_qp_init_attr a = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
				      .cap = { .max_send_wr = 16, .max_recv_wr = 16,
					       .max_send_sge = 1, .max_recv_sge = 1 } };

	TV_MUST(cq && rdma_create_qp(id, id->pd, &a) == 0, "a UD QP through rdma_cm: %s", strerror(errno));
	return cq;
}

static int listener(int sock)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct rdma_conn_param cp = { 0 };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *l, *id;
	struct ibv_mr *mr;
	struct tv_end e;
	struct ibv_wc wc;
	struct pollfd p;
	uint32_t peer_qpn;
	uint16_t port;

	TV_MUST(ch && rdma_create_id(ch, &l, NULL, RDMA_PS_UDP) == 0 &&
		rdma_bind_addr(l, (struct sockaddr *)&a) == 0 && rdma_listen(l, 8) == 0,
		"listen: %s", strerror(errno));
	port = rdma_get_src_port(l);
	TV_MUST(write(sock, &port, 2) == 2, "tell the port");
	ev = tr_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	id = ev->id;
	CHECK(ev->param.ud.private_data_len >= 6 && !memcmp(ev->param.ud.private_data, "hello", 6),
	      "the request's private data (%u bytes)", ev->param.ud.private_data_len);
	peer_qpn = ev->param.ud.qp_num;
	rdma_ack_cm_event(ev);
	e = (struct tv_end){ .ctx = id->verbs, .pd = id->pd, .cq = ud_qp(id), .qp = id->qp };
	mr = tr_region(&e, 8192, IBV_ACCESS_LOCAL_WRITE);
	tv_post_recv(&e, mr, 5);
	cp.qp_num = id->qp->qp_num;
	TV_MUST(rdma_accept(id, &cp) == 0, "accept: %s", strerror(errno));
	wc = tv_wait(&e);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.byte_len == 40 + 100 &&
	      (!peer_qpn || wc.src_qp == peer_qpn), "datagram: status %d len %u from QP %u",
	      wc.status, wc.byte_len, wc.src_qp);
	tv_intact((uint8_t *)mr->addr + 40, 3, 100, "the datagram");
	p = (struct pollfd){ .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 100) == 0, "an event after a UD accept");
	tr_drop_region(mr);
	tr_drop_qp(id, e.cq);
	CHECK(rdma_destroy_id(id) == 0 && rdma_destroy_id(l) == 0, "destroy the ids: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
	return 0;
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct rdma_conn_param cp = { .private_data = "hello", .private_data_len = 6 };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct ibv_ah *ah;
	struct ibv_mr *mr;
	struct tv_end e;
	uint32_t qpn, qkey;
	pid_t pid;
	int sock;

	(void)argc;
	tr_setup(argv);
	pid = tv_fork(listener, &sock);
	ch = rdma_create_event_channel();
	TV_MUST(ch && read(sock, &a.sin_port, 2) == 2, "hear the port");
	TV_MUST(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP) == 0 &&
		rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000) == 0, "resolve: %s", strerror(errno));
	tr_ack(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	TV_MUST(rdma_resolve_route(id, 2000) == 0, "resolve the route: %s", strerror(errno));
	tr_ack(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	e = (struct tv_end){ .ctx = id->verbs, .pd = id->pd, .cq = ud_qp(id), .qp = id->qp };
	mr = tr_region(&e, 4096, 0);
	TV_MUST(rdma_connect(id, &cp) == 0, "connect: %s", strerror(errno));
	ev = tr_event(ch, RDMA_CM_EVENT_ESTABLISHED);
	qpn = ev->param.ud.qp_num;
	qkey = ev->param.ud.qkey;
	CHECK(qkey == RDMA_UDP_QKEY, "Q_Key %#x, want RDMA_UDP_QKEY", qkey);
	ah = ibv_create_ah(id->pd, &ev->param.ud.ah_attr);
	TV_MUST(ah, "an address handle from the event: %s", strerror(errno));
	rdma_ack_cm_event(ev);
	CHECK(tv_send_dgram(&e, id->qp, mr, ah, qpn, qkey, 100, 3) == IBV_WC_SUCCESS, "send the datagram");
	tv_join(pid);
	ibv_destroy_ah(ah);
	tr_drop_region(mr);
	tr_drop_qp(id, e.cq);
	CHECK(rdma_destroy_id(id) == 0, "destroy the id: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
	return t_shim_finish();
}
