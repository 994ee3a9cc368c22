/* SPDX-License-Identifier: MIT */
/*
 * rdma_cm tests: the stock librdmacm (linked) on the virtual verbs device
 * (verbstest.h), its command file /dev/infiniband/rdma_cm a /dev/null as
 * in a container, and a devpts of the test's own for the channel's
 * pseudo-terminal. Two forked processes: a listener and a connector, on
 * loopback; the listener tells its port over the socket pair.
 */
#ifndef FREEFLOW_RDMACMTEST_H
#define FREEFLOW_RDMACMTEST_H

#include <rdma/rdma_cma.h>

#include "verbstest.h"

static inline void tr_setup(char **argv)
{
	tv_setup(argv);
	TV_MUST(mknod("/dev/infiniband/rdma_cm", S_IFCHR | 0666, makedev(1, 3)) == 0 &&
		mkdir("/dev/pts", 0755) == 0 &&
		mount("devpts", "/dev/pts", "devpts", MS_NOSUID, "newinstance,ptmxmode=0666") == 0 &&
		symlink("pts/ptmx", "/dev/ptmx") == 0,
		"rdma_cm and a devpts in /dev: %s", strerror(errno));
	tv_file("sys/class/misc/rdma_cm/abi_version", "4");
}

/*
 * How long the library's CM waits for a peer that answers neither its REQ,
 * REP or DREQ nor with an MRA (calls/rdmacm.h, CM_RESPONSE_MS).
 */
#define TR_ANSWER_MS	10000

/* The next event on ch within ms (poll on its fd first: it must be pollable), of type want. */
static inline struct rdma_cm_event *tr_event_within(struct rdma_event_channel *ch,
						    enum rdma_cm_event_type want, int ms)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev = NULL;

	TV_MUST(poll(&p, 1, ms) == 1, "no rdma_cm event within %d ms (want %s)", ms, rdma_event_str(want));
	TV_MUST(rdma_get_cm_event(ch, &ev) == 0, "rdma_get_cm_event: %s", strerror(errno));
	TV_MUST(ev->event == want, "event %s (status %d), want %s", rdma_event_str(ev->event), ev->status,
		rdma_event_str(want));
	return ev;
}

/* The next event on ch within 10 s, of type want. */
static inline struct rdma_cm_event *tr_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	return tr_event_within(ch, want, 10000);
}

static inline void tr_ack(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	rdma_ack_cm_event(tr_event(ch, want));
}

static inline void tr_ack_within(struct rdma_event_channel *ch, enum rdma_cm_event_type want, int ms)
{
	rdma_ack_cm_event(tr_event_within(ch, want, ms));
}

/*
 * The event want on ch, with status -ETIMEDOUT, no sooner than a silent
 * peer's TR_ANSWER_MS after t0 (t_ms() before the request it ends).
 */
static inline void tr_timed_out(struct rdma_event_channel *ch, enum rdma_cm_event_type want, int64_t t0)
{
	struct rdma_cm_event *ev = tr_event_within(ch, want, TR_ANSWER_MS + 5000);
	int64_t took = t_ms() - t0;

	CHECK(ev->status == -ETIMEDOUT, "%s with status %d, want -ETIMEDOUT", rdma_event_str(want), ev->status);
	CHECK(took >= TR_ANSWER_MS - T_SLACK_MS, "gave up after %lld ms: a peer has %d ms to answer",
	      (long long)took, TR_ANSWER_MS);
	printf("%s after %lld ms\n", rdma_event_str(want), (long long)took);
	rdma_ack_cm_event(ev);
}

/* The peer process stopped (SIGSTOP, as a debugger stops it): its CM thread answers nothing. */
static inline void tr_stop(pid_t pid)
{
	int st;

	TV_MUST(kill(pid, SIGSTOP) == 0 && waitpid(pid, &st, WUNTRACED) == pid && WIFSTOPPED(st),
		"stop the peer process: %s", strerror(errno));
}

/* A peer process killed and reaped (a failed test leaves it to the test's pid namespace). */
static inline void tr_kill(pid_t pid)
{
	int st = 0;

	CHECK(kill(pid, SIGKILL) == 0 && waitpid(pid, &st, 0) == pid && WIFSIGNALED(st),
	      "kill the peer (status %#x)", st);
}

/* An RC QP for id on its device, with a CQ of its own. */
static inline struct ibv_cq *tr_qp(struct rdma_cm_id *id)
{
	struct ibv_cq *cq = ibv_create_cq(id->verbs, 64, NULL, NULL, 0);
	struct ibv_qp_init_attr a = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = { .max_send_wr = 16, .max_recv_wr = 16,
					       .max_send_sge = 1, .max_recv_sge = 1 } };

	TV_MUST(cq && rdma_create_qp(id, id->pd, &a) == 0, "a QP through rdma_cm: %s", strerror(errno));
	return cq;
}

/* id's QP and its CQ destroyed (before the id). */
static inline void tr_drop_qp(struct rdma_cm_id *id, struct ibv_cq *cq)
{
	rdma_destroy_qp(id);
	CHECK(ibv_destroy_cq(cq) == 0, "destroy the CQ");
}

/*
 * len bytes (a multiple of the page), page-aligned, registered on e's PD:
 * the provider moves a remote-access region's whole pages, which would
 * take a malloc'd buffer's neighbours along (AddressSanitizer objects).
 */
static inline struct ibv_mr *tr_region(struct tv_end *e, size_t len, int access)
{
	void *buf = aligned_alloc(4096, len);
	struct ibv_mr *mr = buf ? ibv_reg_mr(e->pd, buf, len, access) : NULL;

	TV_MUST(mr, "register %zu bytes: %s", len, strerror(errno));
	return mr;
}

/* A region of tr_region deregistered and its buffer freed. */
static inline void tr_drop_region(struct ibv_mr *mr)
{
	void *buf = mr->addr;

	CHECK(ibv_dereg_mr(mr) == 0, "deregister a region");
	free(buf);
}

/* An event channel. */
static inline struct rdma_event_channel *tr_channel(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();

	TV_MUST(ch, "event channel: %s", strerror(errno));
	return ch;
}

/* A listener on 127.0.0.1, port chosen by the kernel (rdma_get_src_port). */
static inline struct rdma_cm_id *tr_listener(struct rdma_event_channel *ch)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct rdma_cm_id *l;

	TV_MUST(rdma_create_id(ch, &l, NULL, RDMA_PS_TCP) == 0 &&
		rdma_bind_addr(l, (struct sockaddr *)&a) == 0 && rdma_listen(l, 8) == 0,
		"listen: %s", strerror(errno));
	return l;
}

/* A listener of tr_listener whose port goes to the connector over sock. */
static inline struct rdma_cm_id *tr_listen(struct rdma_event_channel *ch, int sock)
{
	struct rdma_cm_id *l = tr_listener(ch);
	uint16_t port = rdma_get_src_port(l);

	TV_MUST(port && write(sock, &port, 2) == 2, "tell the port");
	return l;
}

/* The id of the next connect request on ch, not yet accepted. */
static inline struct rdma_cm_id *tr_request(struct rdma_event_channel *ch)
{
	struct rdma_cm_event *ev = tr_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *id = ev->id;

	rdma_ack_cm_event(ev);
	return id;
}

/*
 * A listener (into *l unless l is NULL) on a channel of its own (*ch), its
 * port told over sock, and the id of the first connect request it gets.
 */
static inline struct rdma_cm_id *tr_listen_for_one(int sock, struct rdma_event_channel **ch, struct rdma_cm_id **l)
{
	struct rdma_cm_id *listener;

	*ch = tr_channel();
	listener = tr_listen(*ch, sock);
	if (l)
		*l = listener;
	return tr_request(*ch);
}

/* A listener on a channel of its own (the channel) and the one connection it accepted (*id). */
static inline struct rdma_event_channel *tr_accept_one(int sock, struct rdma_cm_id **id)
{
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1 };
	struct rdma_event_channel *ch;

	*id = tr_listen_for_one(sock, &ch, NULL);
	tr_qp(*id);
	TV_MUST(rdma_accept(*id, &cp) == 0, "accept: %s", strerror(errno));
	tr_ack(ch, RDMA_CM_EVENT_ESTABLISHED);
	return ch;
}

/* An id resolved to 127.0.0.1 at port (in network order). */
static inline struct rdma_cm_id *tr_resolve_port(struct rdma_event_channel *ch, uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				 .sin_port = port };
	struct rdma_cm_id *id;

	TV_MUST(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0 &&
		rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000) == 0,
		"resolve: %s", strerror(errno));
	tr_ack(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	TV_MUST(id->verbs, "the resolved id has no device");
	TV_MUST(rdma_resolve_route(id, 2000) == 0, "resolve the route: %s", strerror(errno));
	tr_ack(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	return id;
}

/* An id resolved to 127.0.0.1 at the port the listener tells over sock. */
static inline struct rdma_cm_id *tr_resolve(struct rdma_event_channel *ch, int sock)
{
	uint16_t port;

	TV_MUST(read(sock, &port, 2) == 2, "hear the port");
	return tr_resolve_port(ch, port);
}

/* A channel of its own (*ch) and an id on it resolved to the listener's port told over sock. */
static inline struct rdma_cm_id *tr_connect_to(int sock, struct rdma_event_channel **ch)
{
	*ch = tr_channel();
	return tr_resolve(*ch, sock);
}

/* rdma_connect of id as the tests' connectors ask: one read each way, 7 retries. */
static inline void tr_connect(struct rdma_cm_id *id)
{
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1, .retry_count = 7 };

	TV_MUST(rdma_connect(id, &cp) == 0, "connect: %s", strerror(errno));
}

/* An id on ch with a QP (its CQ into *cq), connected to the listener whose port is told over sock. */
static inline struct rdma_cm_id *tr_connected(struct rdma_event_channel *ch, int sock, struct ibv_cq **cq)
{
	struct rdma_cm_id *id = tr_resolve(ch, sock);

	*cq = tr_qp(id);
	tr_connect(id);
	tr_ack(ch, RDMA_CM_EVENT_ESTABLISHED);
	return id;
}

/*
 * A connector (a tv_fork peer) that sends its REQ and then reads no event,
 * so sends no RTU, until it is stopped or killed.
 */
static inline int tr_silent_connector(int sock)
{
	struct rdma_event_channel *ch;

	tr_connect(tr_connect_to(sock, &ch));
	pause();
	return 1;
}

#endif
