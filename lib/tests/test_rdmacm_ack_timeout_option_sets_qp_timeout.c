/* SPDX-License-Identifier: MIT */
/* Description: rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT) on each end before connect and accept (rdma-core's test_rdmacm_async_traffic sets 21): the QP librdmacm brings to RTS has that timeout, rdma_init_qp_attr gives it for RTS (14 without the option); the option is refused on a UD id and with a length other than one byte, as by the kernel's CM */
#include "rdmacmtest.h"

/* The QP's ack timeout, as queried. */
static uint8_t qp_timeout(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	TV_MUST(ibv_query_qp(qp, &a, IBV_QP_TIMEOUT, &ia) == 0, "query the QP");
	return a.timeout;
}

/* id's RTS attributes from rdma_cm, their timeout. */
static uint8_t rts_timeout(struct rdma_cm_id *id)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTS };
	int mask;

	TV_MUST(rdma_init_qp_attr(id, &a, &mask) == 0, "RTS attributes: %s", strerror(errno));
	CHECK(mask & IBV_QP_TIMEOUT, "RTS attributes without a timeout (mask %#x)", mask);
	return a.timeout;
}

static int listener(int sock)
{
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1 };
	struct rdma_event_channel *ch;
	struct rdma_cm_id *l, *id = tr_listen_for_one(sock, &ch, &l);
	struct ibv_cq *cq = tr_qp(id);
	uint8_t t = 19;

	TV_MUST(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, sizeof(t)) == 0,
		"set the ack timeout: %s", strerror(errno));
	TV_MUST(rdma_accept(id, &cp) == 0, "accept: %s", strerror(errno));
	CHECK(qp_timeout(id->qp) == 19, "the accepted QP's timeout is %u, want 19 (set)", qp_timeout(id->qp));
	CHECK(rts_timeout(id) == 19, "RTS attributes: timeout %u, want 19", rts_timeout(id));
	/* Only now may the connector disconnect: a disconnected id has no RTS attributes. */
	CHECK(write(sock, "k", 1) == 1, "tell the connector");
	tr_ack(ch, RDMA_CM_EVENT_ESTABLISHED);
	tr_ack(ch, RDMA_CM_EVENT_DISCONNECTED);
	tr_drop_qp(id, cq);
	CHECK(rdma_destroy_id(id) == 0 && rdma_destroy_id(l) == 0, "destroy the ids: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
	return 0;
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id, *other, *ud;
	struct ibv_cq *cq;
	uint8_t t = 21;
	int wide = 21;
	pid_t pid;
	int sock;
	char c;

	(void)argc;
	tr_setup(argv);
	pid = tv_fork(listener, &sock);
	id = tr_connect_to(sock, &ch);
	cq = tr_qp(id);
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &wide, sizeof(wide)) == -1 &&
	      errno == EINVAL, "an ack timeout of %zu bytes taken (errno %d)", sizeof(wide), errno);
	TV_MUST(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, sizeof(t)) == 0,
		"set the ack timeout: %s", strerror(errno));
	tr_connect(id);
	tr_ack(ch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(qp_timeout(id->qp) == 21, "the connected QP's timeout is %u, want 21 (set)", qp_timeout(id->qp));
	CHECK(rts_timeout(id) == 21, "RTS attributes: timeout %u, want 21", rts_timeout(id));

	TV_MUST(rdma_create_id(ch, &other, NULL, RDMA_PS_TCP) == 0 && rdma_create_id(ch, &ud, NULL, RDMA_PS_UDP) == 0,
		"more ids: %s", strerror(errno));
	CHECK(rdma_set_option(ud, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t, sizeof(t)) == -1 && errno == EINVAL,
	      "an ack timeout taken on a UD id (errno %d)", errno);
	CHECK(rdma_destroy_id(other) == 0 && rdma_destroy_id(ud) == 0, "destroy the ids: %s", strerror(errno));

	CHECK(read(sock, &c, 1) == 1, "the listener's checks");
	TV_MUST(rdma_disconnect(id) == 0, "disconnect: %s", strerror(errno));
	tr_ack(ch, RDMA_CM_EVENT_DISCONNECTED);
	tr_drop_qp(id, cq);
	CHECK(rdma_destroy_id(id) == 0, "destroy the id: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
	tv_join(pid);
	return t_shim_finish();
}
