/* SPDX-License-Identifier: MIT */
/* Description: the CM's messages as a peer's CM sees them on the TCP connection (docs/VERBS.md, "rdma_cm"): a listener's CM answers a REQ it queued to its program with an MRA, and the REQ resent (the peer's MRA time up) with another; a connector's CM the same for a REP; a REQ or REP resent as the answer crosses it is ignored, not a broken connection; the peer's QPN stays its REQ's after the RTU; a peer whose REQ does not say it speaks MRAs (a library from before them, which drops one) gets none */
#include "rdmacmtest.h"

/* struct cm_msg of calls/rdmacm.h, as it goes on the wire (integers in network order). */
struct wire {
	uint8_t magic[4];
	uint8_t type, pd_len, resp_res, init_depth;
	uint8_t flow_control, retry, rnr_retry, srq;
	uint32_t qpn, psn, reason, qkey;
	uint16_t lid, flags;
	uint8_t gid[16];
	uint8_t pd[256];
};
enum { M_REQ = 1, M_REP, M_RTU, M_REJ, M_DREQ, M_DREP, M_MRA };
enum { CMF_MRA = 1 };

/* The library's own calls would take these sockets: the fake peer's are the kernel's, as a CM's. */
static void put_flags(int fd, int type, uint32_t qpn, uint16_t flags)
{
	struct wire m = { .magic = "FFCM", .type = (uint8_t)type, .resp_res = 1, .init_depth = 1,
			  .qpn = htonl(qpn), .psn = htonl(0x4242), .flags = htons(flags) };

	TV_MUST(t_raw(SYS_sendto, fd, &m, sizeof(m), MSG_NOSIGNAL, NULL, 0) == (long)sizeof(m),
		"send message %d: %s", type, strerror(errno));
}

static void put(int fd, int type, uint32_t qpn)
{
	put_flags(fd, type, qpn, CMF_MRA);
}

static struct wire get(int fd, int want)
{
	struct wire m;

	TV_MUST(t_raw(SYS_recvfrom, fd, &m, sizeof(m), MSG_WAITALL, NULL, NULL) == (long)sizeof(m),
		"no message %d within 5 s: %s", want, strerror(errno));
	TV_MUST(!memcmp(m.magic, "FFCM", 4) && m.type == want, "message %d, want %d", m.type, want);
	CHECK(ntohs(m.flags) & CMF_MRA, "message %d does not say its CM speaks MRAs", m.type);
	return m;
}

/* A kernel TCP socket to 127.0.0.1 (connected to port, or listening if port is 0), reads time out in 5 s. */
static int raw_socket(uint16_t port, uint16_t *bound)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = port };
	struct timeval tv = { .tv_sec = 5 };
	socklen_t len = sizeof(a);
	int fd = (int)t_raw(SYS_socket, AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	TV_MUST(fd >= 0 && t_raw(SYS_setsockopt, fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0,
		"a socket: %s", strerror(errno));
	if (port) {
		TV_MUST(t_raw(SYS_connect, fd, &a, sizeof(a)) == 0, "connect: %s", strerror(errno));
		return fd;
	}
	TV_MUST(t_raw(SYS_bind, fd, &a, sizeof(a)) == 0 && t_raw(SYS_listen, fd, 1) == 0 &&
		t_raw(SYS_getsockname, fd, &a, &len) == 0, "listen: %s", strerror(errno));
	*bound = a.sin_port;
	return fd;
}

/* The library's listener, a fake connector: REQ, MRA; REQ again, MRA; REP; REQ crossing it, RTU. */
static void listener_side(struct rdma_event_channel *ch)
{
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1, .qp_num = 0x456 };
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_RTR };
	struct rdma_cm_id *l = tr_listener(ch), *id;
	int fd = raw_socket(rdma_get_src_port(l), NULL), mask;

	put(fd, M_REQ, 0x123);
	id = tr_request(ch);
	get(fd, M_MRA);
	put(fd, M_REQ, 0x123);
	get(fd, M_MRA);
	TV_MUST(rdma_accept(id, &cp) == 0, "accept: %s", strerror(errno));
	CHECK(ntohl(get(fd, M_REP).qpn) == 0x456, "the REP has not the accept's QPN");
	put(fd, M_REQ, 0x123);		/* resent as the REP crossed it */
	put(fd, M_MRA, 0);
	put(fd, M_RTU, 0);
	tr_ack(ch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(rdma_init_qp_attr(id, &qa, &mask) == 0 && qa.dest_qp_num == 0x123,
	      "RTR's destination QPN %#x after the RTU, want the REQ's 0x123", qa.dest_qp_num);
	t_raw(SYS_close, fd);
	tr_ack(ch, RDMA_CM_EVENT_DISCONNECTED);
	CHECK(rdma_destroy_id(id) == 0 && rdma_destroy_id(l) == 0, "destroy the ids: %s", strerror(errno));
}

/* The library's listener, a fake connector from before MRAs: REQ; REP, nothing before it; RTU. */
static void listener_side_old_peer(struct rdma_event_channel *ch)
{
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1, .qp_num = 0x456 };
	struct rdma_cm_id *l = tr_listener(ch), *id;
	int fd = raw_socket(rdma_get_src_port(l), NULL);

	put_flags(fd, M_REQ, 0x123, 0);
	id = tr_request(ch);
	TV_MUST(rdma_accept(id, &cp) == 0, "accept: %s", strerror(errno));
	get(fd, M_REP);
	put_flags(fd, M_RTU, 0, 0);
	tr_ack(ch, RDMA_CM_EVENT_ESTABLISHED);
	t_raw(SYS_close, fd);
	tr_ack(ch, RDMA_CM_EVENT_DISCONNECTED);
	CHECK(rdma_destroy_id(id) == 0 && rdma_destroy_id(l) == 0, "destroy the ids: %s", strerror(errno));
}

/* The library's connector, a fake listener: REQ; REP, MRA; REP again, MRA; RTU; REP crossing it, DREQ, DREP. */
static void connector_side(struct rdma_event_channel *ch)
{
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1, .qp_num = 0x789 };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	uint16_t port;
	int lfd, fd;

	lfd = raw_socket(0, &port);
	id = tr_resolve_port(ch, port);
	TV_MUST(rdma_connect(id, &cp) == 0, "connect: %s", strerror(errno));
	fd = (int)t_raw(SYS_accept4, lfd, NULL, NULL, SOCK_CLOEXEC);
	TV_MUST(fd >= 0, "accept the CM's connection: %s", strerror(errno));
	CHECK(ntohl(get(fd, M_REQ).qpn) == 0x789, "the REQ has not the connect's QPN");
	put(fd, M_REP, 0x321);
	get(fd, M_MRA);
	put(fd, M_REP, 0x321);
	get(fd, M_MRA);
	ev = tr_event(ch, RDMA_CM_EVENT_CONNECT_RESPONSE);
	CHECK(ev->param.conn.qp_num == 0x321, "CONNECT_RESPONSE names QP %#x", ev->param.conn.qp_num);
	rdma_ack_cm_event(ev);
	TV_MUST(rdma_establish(id) == 0, "establish: %s", strerror(errno));
	get(fd, M_RTU);
	put(fd, M_REP, 0x321);		/* resent as the RTU crossed it */
	put(fd, M_DREQ, 0);
	get(fd, M_DREP);
	tr_ack(ch, RDMA_CM_EVENT_DISCONNECTED);
	t_raw(SYS_close, fd);
	t_raw(SYS_close, lfd);
	CHECK(rdma_destroy_id(id) == 0, "destroy the id: %s", strerror(errno));
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;

	(void)argc;
	tr_setup(argv);
	ch = tr_channel();
	listener_side(ch);
	listener_side_old_peer(ch);
	connector_side(ch);
	rdma_destroy_event_channel(ch);
	return t_shim_finish();
}
