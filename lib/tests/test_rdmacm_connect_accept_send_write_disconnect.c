/* SPDX-License-Identifier: MIT */
/* Description: the stock librdmacm between two processes on the virtual device: connect and accept carry private data both ways (the connector's names its region), each QP's receive PSN is the other's send PSN, the QPs librdmacm brought up carry a SEND one way and an RDMA WRITE the other, a disconnect is seen by both ends; the channel fd is pollable and quiet until an event */
#include "rdmacmtest.h"

/* QP's send and receive PSNs, as queried. */
static void psns(struct ibv_qp *qp, uint32_t out[2])
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	TV_MUST(ibv_query_qp(qp, &a, IBV_QP_SQ_PSN | IBV_QP_RQ_PSN, &ia) == 0, "query the QP");
	out[0] = a.sq_psn;
	out[1] = a.rq_psn;
}

struct region {
	uint64_t addr;
	uint32_t rkey;
	char hello[16];
};

/* The listener: accepts, receives a SEND, writes into the connector's region, sees its disconnect. */
static int listener(int sock)
{
	struct rdma_event_channel *ch = tr_channel();
	struct rdma_conn_param cp = { .private_data = "accepted", .private_data_len = 9,
				      .responder_resources = 1, .initiator_depth = 1 };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *l, *id;
	struct region peer;
	struct pollfd p;
	struct ibv_mr *rmr, *wmr;
	struct ibv_cq *cq;
	struct tv_end e;

	l = tr_listen(ch, sock);
	p = (struct pollfd){ .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 0) == 0, "the channel is readable with no event queued");
	ev = tr_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	id = ev->id;
	CHECK(ev->listen_id == l, "the request names listener %p, want %p", (void *)ev->listen_id, (void *)l);
	TV_MUST(ev->param.conn.private_data_len >= sizeof(peer), "request private data %u bytes",
		ev->param.conn.private_data_len);
	memcpy(&peer, ev->param.conn.private_data, sizeof(peer));
	CHECK(!strcmp(peer.hello, "connecting"), "request private data says %.16s", peer.hello);
	CHECK(ev->param.conn.initiator_depth == 1 && ev->param.conn.responder_resources == 1,
	      "request: initiator depth %u responder resources %u", ev->param.conn.initiator_depth,
	      ev->param.conn.responder_resources);
	rdma_ack_cm_event(ev);
	TV_MUST(id->verbs, "the request's id has no device");
	cq = tr_qp(id);
	e = (struct tv_end){ .ctx = id->verbs, .pd = id->pd, .cq = cq, .qp = id->qp };
	rmr = tr_region(&e, 4096, IBV_ACCESS_LOCAL_WRITE);
	wmr = tr_region(&e, 4096, 0);
	tv_post_recv(&e, rmr, 7);
	TV_MUST(rdma_accept(id, &cp) == 0, "accept: %s", strerror(errno));
	tr_ack(ch, RDMA_CM_EVENT_ESTABLISHED);
	tv_got(&e, rmr, 7, 1000);
	uint32_t mine[2], theirs[2];
	psns(id->qp, mine);
	TV_MUST(read(sock, theirs, sizeof(theirs)) == sizeof(theirs), "hear the PSNs");
	CHECK(mine[1] == theirs[0] && mine[0] == theirs[1],
	      "PSNs: send %#x receive %#x here, send %#x receive %#x there", mine[0], mine[1], theirs[0], theirs[1]);

	struct ibv_sge sge = { .addr = (uintptr_t)wmr->addr, .length = 3000, .lkey = wmr->lkey };
	struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
				  .wr.rdma = { .remote_addr = peer.addr, .rkey = peer.rkey } }, *bad;
	for (uint32_t k = 0; k < 3000; k++)
		((uint8_t *)wmr->addr)[k] = tv_pattern(9, k);
	TV_MUST(ibv_post_send(id->qp, &wr, &bad) == 0, "post the RDMA WRITE: %s", strerror(errno));
	struct ibv_wc wc = tv_wait(&e);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 9, "RDMA WRITE: status %d", wc.status);
	tv_say(sock, 'w');
	tr_ack(ch, RDMA_CM_EVENT_DISCONNECTED);
	tr_drop_region(rmr);
	tr_drop_region(wmr);
	tr_drop_qp(id, cq);
	CHECK(rdma_destroy_id(id) == 0 && rdma_destroy_id(l) == 0, "destroy the ids: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
	return 0;
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct region mine = { .hello = "connecting" };
	struct ibv_mr *smr, *wmr;
	struct ibv_cq *cq;
	struct tv_end e;
	pid_t pid;
	int sock;

	(void)argc;
	tr_setup(argv);
	pid = tv_fork(listener, &sock);
	id = tr_connect_to(sock, &ch);
	cq = tr_qp(id);
	e = (struct tv_end){ .ctx = id->verbs, .pd = id->pd, .cq = cq, .qp = id->qp };
	smr = tr_region(&e, 4096, 0);
	wmr = tr_region(&e, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	memset(wmr->addr, 0, 4096);
	mine.addr = (uintptr_t)wmr->addr;
	mine.rkey = wmr->rkey;
	cp.private_data = &mine;
	cp.private_data_len = sizeof(mine);
	TV_MUST(rdma_connect(id, &cp) == 0, "connect: %s", strerror(errno));
	ev = tr_event(ch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(ev->param.conn.private_data_len >= 9 && !memcmp(ev->param.conn.private_data, "accepted", 9),
	      "the accept's private data (%u bytes) is not the listener's", ev->param.conn.private_data_len);
	rdma_ack_cm_event(ev);
	uint32_t psn[2];
	psns(id->qp, psn);
	TV_MUST(write(sock, psn, sizeof(psn)) == sizeof(psn), "tell the PSNs");
	tv_send(&e, smr, smr->addr, 1000, 7);
	struct ibv_wc wc = tv_wait(&e);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND, "SEND: status %d", wc.status);
	tv_hear(sock, 'w');
	tv_intact(wmr->addr, 9, 3000, "the RDMA WRITE");
	TV_MUST(rdma_disconnect(id) == 0, "disconnect: %s", strerror(errno));
	tr_ack(ch, RDMA_CM_EVENT_DISCONNECTED);
	tr_drop_region(smr);
	tr_drop_region(wmr);
	tr_drop_qp(id, cq);
	CHECK(rdma_destroy_id(id) == 0, "destroy the id: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
	tv_join(pid);
	return t_shim_finish();
}
