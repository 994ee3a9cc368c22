/* SPDX-License-Identifier: MIT */
/*
 * rdma_cm's command file: each rdma_ucm command written to
 * /dev/infiniband/rdma_cm answered as the kernel's (calls/rdmacm.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include <rdma/ib_user_ioctl_verbs.h>

#include "calls/rdmacm.h"

static int is_any(const struct sockaddr_in6 *a)
{
	if (a->sin6_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr == htonl(INADDR_ANY);
	return !memcmp(&a->sin6_addr, &in6addr_any, sizeof(in6addr_any));
}

/* Whether id is on this device: bound to an address, resolved, or accepted (QUERY_ROUTE's node_guid). */
static int has_device(const struct cm_id *id)
{
	return ff_cm.have_dev && id->state != S_IDLE && (id->state != S_BOUND || !is_any(&id->src)) &&
	       (id->state != S_LISTEN || !is_any(&id->src));
}

/* Copy the command body (in bytes given) into cmd, zero-padded; -errno. */
static int get_cmd(void *cmd, size_t size, const void *body, size_t in)
{
	memset(cmd, 0, size);
	return ff_user_read(cmd, body, in < size ? in : size);
}

/* get_cmd, then the id it names (the u32 at id_off): this channel's, or NULL and *err (-EINVAL). */
static struct cm_id *get_id_cmd(struct cm_chan *c, void *cmd, size_t size, size_t id_off, const void *body,
				size_t in, int *err)
{
	struct cm_id *id;
	uint32_t h;

	if ((*err = get_cmd(cmd, size, body, in)))
		return NULL;
	memcpy(&h, (const char *)cmd + id_off, sizeof(h));
	if (!(id = cm_id_of(c, h)))
		*err = -EINVAL;
	return id;
}
#define GET_ID_CMD(c, cmd, body, in, err) \
	get_id_cmd(c, &(cmd), sizeof(cmd), offsetof(__typeof__(cmd), id), body, in, &(err))

/* Write len bytes of resp (at most out) to the program's response buffer; -EFAULT as the kernel. */
static int put_resp(uint64_t to, const void *resp, size_t len, size_t out)
{
	struct iovec from = { (void *)resp, len < out ? len : out };
	struct iovec dst = { (void *)(uintptr_t)to, from.iov_len };

	if (!from.iov_len)
		return 0;
	if (process_vm_writev(getpid(), &from, 1, &dst, 1, 0) != (ssize_t)from.iov_len)
		return errno == EPERM || errno == ENOSYS ? -errno : -EFAULT;
	return 0;
}

static void conn_to_msg(struct cm_msg *m, const struct rdma_ucm_conn_param *p)
{
	memset(m, 0, sizeof(*m));
	m->qpn = htonl(p->qp_num);
	m->pd_len = p->private_data_len;
	memcpy(m->pd, p->private_data, p->private_data_len);
	m->srq = p->srq;
	m->resp_res = p->responder_resources;
	m->init_depth = p->initiator_depth;
	m->flow_control = p->flow_control;
	m->retry = p->retry_count;
	m->rnr_retry = p->rnr_retry_count;
}

static void fill_route(const struct cm_id *id, struct rdma_ucm_query_route_resp *r)
{
	struct ib_user_path_rec *pr = &r->ib_route[0];
	static const uint8_t v4mapped[12] = { [10] = 0xff, [11] = 0xff };

	memcpy(&r->src_addr, &id->src, sizeof(id->src));
	memcpy(&r->dst_addr, &id->dst, sizeof(id->dst));
	r->ibdev_index = UINT32_MAX;	/* match the device by its GUID */
	if (!has_device(id))
		return;
	r->node_guid = ff_cm.guid;
	r->port_num = 1;
	memcpy(pr->sgid, ff_cm.gid, 16);
	pr->slid = htons(ff_cm.lid);
	pr->pkey = htons(0xffff);
	pr->mtu = MTU_4096;
	pr->numb_path = 1;
	if (id->state >= S_REQ_SENT && id->state != S_ACCEPTING && id->peer.type) {
		memcpy(pr->dgid, id->peer.gid, 16);
		pr->dlid = id->peer.lid;
	} else if (id->dst.sin6_family == AF_INET) {
		/* Before the peer said: its address as an IPv4 port's GID. */
		memcpy(pr->dgid, v4mapped, 12);
		memcpy(pr->dgid + 12, &((const struct sockaddr_in *)&id->dst)->sin_addr, 4);
	} else {
		memcpy(pr->dgid, &id->dst.sin6_addr, 16);
	}
	r->num_paths = id->state >= S_ROUTE && id->state != S_LISTEN ? 1 : 0;
}

static int init_qp_attr(const struct cm_id *id, uint32_t state, struct ib_uverbs_qp_attr *a)
{
	const struct cm_msg *p = &id->peer;

	memset(a, 0, sizeof(*a));
	a->qp_state = state;
	if (id->ps == RDMA_PS_UDP) {
		/* As the kernel's CM: a Q_Key at INIT, nothing of a peer after. */
		a->qp_attr_mask = QP_STATE;
		if (state == QPS_INIT) {
			a->qp_attr_mask |= QP_PKEY_INDEX | QP_PORT | QP_QKEY;
			a->qkey = UDP_QKEY;
			a->port_num = 1;
		} else if (state == QPS_RTS) {
			a->qp_attr_mask |= QP_SQ_PSN;
		} else if (state != QPS_RTR) {
			return -EINVAL;
		}
		return 0;
	}
	switch (state) {
	case QPS_INIT:
		a->qp_attr_mask = QP_STATE | QP_ACCESS_FLAGS | QP_PKEY_INDEX | QP_PORT;
		a->qp_access_flags = IB_UVERBS_ACCESS_LOCAL_WRITE | IB_UVERBS_ACCESS_REMOTE_WRITE |
				     IB_UVERBS_ACCESS_REMOTE_READ | IB_UVERBS_ACCESS_REMOTE_ATOMIC;
		a->port_num = 1;
		return 0;
	case QPS_RTR:
		if (!p->type || id->state < S_REQ_SENT || id->state == S_DONE)
			return -EINVAL;
		a->qp_attr_mask = QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN |
				  QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER;
		a->path_mtu = MTU_4096;
		a->dest_qp_num = ntohl(p->qpn);
		a->rq_psn = ntohl(p->psn);
		a->max_dest_rd_atomic = id->mine.resp_res ? id->mine.resp_res : 1;
		a->min_rnr_timer = 12;
		a->ah_attr.dlid = ntohs(p->lid);
		a->ah_attr.is_global = 1;
		memcpy(a->ah_attr.grh.dgid, p->gid, 16);
		a->ah_attr.grh.hop_limit = 64;
		a->ah_attr.port_num = 1;
		return 0;
	case QPS_RTS:
		if (!p->type || id->state < S_REQ_SENT || id->state == S_DONE)
			return -EINVAL;
		a->qp_attr_mask = QP_STATE | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY |
				  QP_SQ_PSN | QP_MAX_QP_RD_ATOMIC;
		a->sq_psn = id->psn;
		a->timeout = id->timeout_set ? id->timeout : 14;
		a->retry_cnt = 7;
		a->rnr_retry = 7;
		a->max_rd_atomic = id->mine.init_depth ? id->mine.init_depth : 1;
		return 0;
	default:
		return -EINVAL;
	}
}

static int cmd_create(struct cm_chan *c, const void *body, size_t in, size_t out)
{
	struct rdma_ucm_create_id cmd;
	struct rdma_ucm_create_id_resp r = { 0 };
	struct cm_id *id;
	int err = get_cmd(&cmd, sizeof(cmd), body, in);

	if (err)
		return err;
	if (cmd.ps != RDMA_PS_TCP && cmd.ps != RDMA_PS_IB && cmd.ps != RDMA_PS_UDP)
		return -EOPNOTSUPP;	/* RDMA_PS_IPOIB: no IPoIB here */
	if (!(id = cm_id_new(c, cmd.ps)))
		return -ENOMEM;
	if ((err = cm_id_handle(id))) {
		id->state = S_ACCEPTING;	/* no handle to give back */
		cm_id_free(id);
		return err;
	}
	id->uid = cmd.uid;
	r.id = id->handle;
	if ((err = put_resp(cmd.response, &r, sizeof(r), out)))
		cm_id_free(id);
	return err;
}

static int cmd_destroy(struct cm_chan *c, const void *body, size_t in, size_t out)
{
	struct rdma_ucm_destroy_id cmd;
	struct rdma_ucm_destroy_id_resp r = { 0 };
	struct cm_id *id;
	int err;

	if (!(id = GET_ID_CMD(c, cmd, body, in, err)))
		return err;
	r.events_reported = id->reported;
	/* A connection still up: closing it is the peer's DISCONNECTED (the kernel sends a DREQ). */
	cm_id_free(id);
	return put_resp(cmd.response, &r, sizeof(r), out);
}

static int cmd_bind(struct cm_chan *c, const void *body, size_t in, int ip)
{
	struct rdma_ucm_bind_ip bi;
	struct rdma_ucm_bind b;
	struct sockaddr_in6 a = { 0 };
	struct cm_id *id;
	int err;

	if (ip) {
		if ((err = get_cmd(&bi, sizeof(bi), body, in)))
			return err;
		id = cm_id_of(c, bi.id);
		a = bi.addr;
	} else {
		if ((err = get_cmd(&b, sizeof(b), body, in)))
			return err;
		id = cm_id_of(c, b.id);
		if (!cm_family_ok(&b.addr))
			return -EAFNOSUPPORT;	/* AF_IB: librdmacm then speaks IP */
		memcpy(&a, &b.addr, sizeof(a));
	}
	return id ? cm_bind_id(id, &a) : -EINVAL;
}

static int resolve(struct cm_chan *c, uint32_t h, const void *src, const void *dst)
{
	struct cm_id *id = cm_id_of(c, h);
	struct sockaddr_in6 any = { 0 };
	int err;

	if (!id)
		return -EINVAL;
	if (!cm_family_ok(dst))
		return -EAFNOSUPPORT;
	if (id->state == S_IDLE) {
		if (cm_family_ok(src) && ((const struct sockaddr *)src)->sa_family ==
				      ((const struct sockaddr *)dst)->sa_family)
			memcpy(&any, src, cm_sa_len(src));
		else
			any.sin6_family = ((const struct sockaddr *)dst)->sa_family;
		if ((err = cm_bind_id(id, &any)))
			return err;
	}
	if (id->state != S_BOUND && id->state != S_ADDR)
		return -EINVAL;
	memset(&id->dst, 0, sizeof(id->dst));
	memcpy(&id->dst, dst, cm_sa_len(dst));
	if (!ff_cm.have_dev) {
		cm_id_event(id, EV_ADDR_ERROR, -ENODEV, NULL);
		return 0;
	}
	id->state = S_ADDR;
	cm_id_event(id, EV_ADDR_RESOLVED, 0, NULL);
	return 0;
}

static int cmd_resolve_ip(struct cm_chan *c, const void *body, size_t in)
{
	struct rdma_ucm_resolve_ip cmd;
	int err = get_cmd(&cmd, sizeof(cmd), body, in);

	return err ? err : resolve(c, cmd.id, &cmd.src_addr, &cmd.dst_addr);
}

static int cmd_resolve_addr(struct cm_chan *c, const void *body, size_t in)
{
	struct rdma_ucm_resolve_addr cmd;
	int err = get_cmd(&cmd, sizeof(cmd), body, in);

	return err ? err : resolve(c, cmd.id, &cmd.src_addr, &cmd.dst_addr);
}

static int cmd_resolve_route(struct cm_chan *c, const void *body, size_t in)
{
	struct rdma_ucm_resolve_route cmd;
	struct cm_id *id;
	int err;

	if (!(id = GET_ID_CMD(c, cmd, body, in, err)))
		return err;
	if ((id->state != S_ADDR && id->state != S_ROUTE))
		return -EINVAL;
	id->state = S_ROUTE;
	cm_id_event(id, EV_ROUTE_RESOLVED, 0, NULL);
	return 0;
}

static int cmd_query_route(struct cm_chan *c, const void *body, size_t in, size_t out)
{
	struct rdma_ucm_query cmd;
	struct rdma_ucm_query_route_resp r;
	struct cm_id *id;
	int err;

	if (!(id = GET_ID_CMD(c, cmd, body, in, err)))
		return err;
	memset(&r, 0, sizeof(r));
	fill_route(id, &r);
	return put_resp(cmd.response, &r, sizeof(r), out);
}

static int cmd_query(struct cm_chan *c, const void *body, size_t in, size_t out)
{
	struct rdma_ucm_query cmd;
	struct rdma_ucm_query_addr_resp r;
	struct cm_id *id;
	int err;

	if (!(id = GET_ID_CMD(c, cmd, body, in, err)))
		return err;
	if (cmd.option != RDMA_USER_CM_QUERY_ADDR)
		return -ENOSYS;		/* PATH and GID: for AF_IB ids, which this device has not */
	memset(&r, 0, sizeof(r));
	r.src_size = (uint16_t)(id->src.sin6_family ? cm_sa_len(&id->src) : 0);
	r.dst_size = (uint16_t)(id->dst.sin6_family ? cm_sa_len(&id->dst) : 0);
	memcpy(&r.src_addr, &id->src, sizeof(id->src));
	memcpy(&r.dst_addr, &id->dst, sizeof(id->dst));
	r.ibdev_index = UINT32_MAX;
	if (has_device(id)) {
		r.node_guid = ff_cm.guid;
		r.port_num = 1;
		r.pkey = htons(0xffff);
	}
	return put_resp(cmd.response, &r, sizeof(r), out);
}

static int cmd_listen(struct cm_chan *c, const void *body, size_t in)
{
	struct rdma_ucm_listen cmd;
	struct sockaddr_in6 any = { .sin6_family = AF_INET };
	struct cm_id *id;
	int err;

	if (!(id = GET_ID_CMD(c, cmd, body, in, err)))
		return err;
	if (id->state == S_IDLE && (err = cm_bind_id(id, &any)))
		return err;
	if (id->state == S_LISTEN)
		return 0;
	if (id->state != S_BOUND)
		return -EINVAL;
	if ((err = cm_start_thread()))
		return err;
	if (ff_real.listen(id->sock, cmd.backlog > 0 ? (int)cmd.backlog : 128) < 0)
		return -errno;
	id->state = S_LISTEN;
	cm_wake_thread();
	return 0;
}

static int cmd_connect(struct cm_chan *c, const void *body, size_t in)
{
	struct rdma_ucm_connect cmd;
	struct cm_id *id;
	int err;

	if (!(id = GET_ID_CMD(c, cmd, body, in, err)))
		return err;
	if (id->state != S_ROUTE)
		return -EINVAL;
	if ((err = cm_start_thread()))
		return err;
	conn_to_msg(&id->mine, &cmd.conn_param);
	id->psn = cm_new_psn(id);
	id->state = S_CONNECTING;
	id->deadline = ff_now_ms() + CM_CONNECT_MS;
	if (ff_real.connect(id->sock, (struct sockaddr *)&id->dst, cm_sa_len(&id->dst)) < 0 &&
	    errno != EINPROGRESS)
		cm_connect_failed(id, errno);	/* told as an event, as the kernel's CM does */
	cm_wake_thread();
	return 0;
}

static int cmd_accept(struct cm_chan *c, const void *body, size_t in)
{
	struct rdma_ucm_accept cmd;
	struct cm_id *id;
	int err;

	if (!(id = GET_ID_CMD(c, cmd, body, in, err)))
		return err;
	if (id->state == S_REP_RCVD) {		/* the active side's RTU */
		if (cm_send_msg(id, M_RTU, NULL))
			cm_peer_gone(id);
		else
			id->state = S_CONNECTED;
		return 0;
	}
	if (id->state != S_REQ_RCVD)
		return -EINVAL;
	if (cmd.uid)
		id->uid = cmd.uid;
	conn_to_msg(&id->mine, &cmd.conn_param);
	if (id->ps == RDMA_PS_UDP) {
		/* SIDR's REP: the QP and its Q_Key; no event here, as the kernel's. */
		id->mine.qkey = htonl(UDP_QKEY);
		cm_send_msg(id, M_REP, &id->mine);
		cm_close_sock(id);
		id->state = S_DONE;
		return 0;
	}
	cm_await(id, S_REP_SENT);
	if (id->gone || cm_send_msg(id, M_REP, &id->mine))
		cm_peer_gone(id);
	return 0;
}

static int cmd_reject(struct cm_chan *c, const void *body, size_t in)
{
	struct rdma_ucm_reject cmd;
	struct cm_msg m = { 0 };
	struct cm_id *id;
	int err;

	if (!(id = GET_ID_CMD(c, cmd, body, in, err)))
		return err;
	if (id->state != S_REQ_RCVD)
		return -EINVAL;
	m.reason = htonl(REJ_CONSUMER_DEFINED);
	m.pd_len = cmd.private_data_len;
	memcpy(m.pd, cmd.private_data, cmd.private_data_len);
	cm_send_msg(id, M_REJ, &m);
	cm_close_sock(id);
	id->state = S_DONE;
	return 0;
}

static int cmd_disconnect(struct cm_chan *c, const void *body, size_t in)
{
	struct rdma_ucm_disconnect cmd;
	struct cm_id *id;
	int err;

	if (!(id = GET_ID_CMD(c, cmd, body, in, err)))
		return err;
	switch (id->state) {
	case S_CONNECTED:
	case S_REP_SENT:
	case S_REP_RCVD:
		cm_await(id, S_DREQ_SENT);
		if (cm_send_msg(id, M_DREQ, NULL))
			cm_peer_gone(id);
		return 0;
	case S_DREQ_SENT:
	case S_DONE:
		return 0;
	default:
		return -EINVAL;
	}
}

static int cmd_init_qp_attr(struct cm_chan *c, const void *body, size_t in, size_t out)
{
	struct rdma_ucm_init_qp_attr cmd;
	struct ib_uverbs_qp_attr a;
	struct cm_id *id;
	int err;

	if (!(id = GET_ID_CMD(c, cmd, body, in, err)))
		return err;
	if ((err = init_qp_attr(id, cmd.qp_state, &a)))
		return err;
	return put_resp(cmd.response, &a, sizeof(a), out);
}

/* A GET_EVENT leaves c (returning, or its thread cancelled): the last one out of a closed channel drops it. */
static void get_event_done(struct cm_chan *c)
{
	if (!--c->waiters && c->fd < 0)
		cm_chan_drop(c);
}

static void get_event_cancelled(void *c)
{
	get_event_done(c);
	pthread_mutex_unlock(&ff_cm.mu);
}

static int cmd_get_event(int fd, struct cm_chan *c, const void *body, size_t in, size_t out)
{
	struct rdma_ucm_get_event cmd;
	struct cm_event *e;
	int err = get_cmd(&cmd, sizeof(cmd), body, in), fl;

	if (err)
		return err;
	fl = ff_real.fcntl(fd, F_GETFL);
	c->waiters++;
	pthread_cleanup_push(get_event_cancelled, c);
	while (!c->head && !(fl & O_NONBLOCK))
		pthread_cond_wait(&ff_cm.cv, &ff_cm.mu);
	pthread_cleanup_pop(0);
	if (!(e = c->head))
		err = -EAGAIN;
	else if (!(err = put_resp(cmd.response, &e->r, sizeof(e->r), out))) {
		c->head = e->next;
		if (!c->head)
			c->tail = &c->head;
		cm_bell_sync(c, 1);
		e->id->reported++;
		free(e);
	}
	get_event_done(c);
	return err;
}

static int cmd_migrate(struct cm_chan *c, const void *body, size_t in, size_t out)
{
	struct rdma_ucm_migrate_id cmd;
	struct rdma_ucm_migrate_resp r = { 0 };
	struct cm_chan *from;
	struct cm_id *id;
	int err = get_cmd(&cmd, sizeof(cmd), body, in);

	if (err)
		return err;
	if (!(from = cm_chan_of((int)cmd.fd)) || !(id = cm_id_of(from, cmd.id)))
		return -EINVAL;
	if (from != c) {
		cm_unqueue(id, c);
		id->ch = c;
	}
	r.events_reported = id->reported;
	return put_resp(cmd.response, &r, sizeof(r), out);
}

/*
 * SET_OPTION: RDMA_OPTION_ID_ACK_TIMEOUT (one byte, RC ids only, as the
 * kernel's rdma_set_ack_timeout) becomes the timeout INIT_QP_ATTR gives for
 * RTS; the others (TOS, REUSEADDR, AFONLY, IB_PATH) tune what the kernel's
 * CM does on a fabric: taken, no effect.
 */
static int cmd_set_option(struct cm_chan *c, const void *body, size_t in)
{
	struct rdma_ucm_set_option cmd = { 0 };
	struct cm_id *id;
	uint8_t v;
	int err;

	if (!(id = GET_ID_CMD(c, cmd, body, in, err)))
		return err;
	if (cmd.level != RDMA_OPTION_ID || cmd.optname != RDMA_OPTION_ID_ACK_TIMEOUT)
		return 0;
	if (cmd.optlen != sizeof(v) || id->ps == RDMA_PS_UDP)
		return -EINVAL;
	if ((err = ff_user_read(&v, (const void *)(uintptr_t)cmd.optval, sizeof(v))))
		return err;
	id->timeout = v;
	id->timeout_set = 1;
	return 0;
}

/* NOTIFY (an event the program asks of the CM, for IB's path migration): the id must be this channel's. */
static int cmd_notify(struct cm_chan *c, const void *body, size_t in)
{
	struct rdma_ucm_notify cmd;
	int err;

	return GET_ID_CMD(c, cmd, body, in, err) ? 0 : err;
}

static int dispatch(int fd, struct cm_chan *c, uint32_t cmd, const void *body, size_t in, size_t out)
{
	switch (cmd) {
	case RDMA_USER_CM_CMD_CREATE_ID:	return cmd_create(c, body, in, out);
	case RDMA_USER_CM_CMD_DESTROY_ID:	return cmd_destroy(c, body, in, out);
	case RDMA_USER_CM_CMD_BIND_IP:		return cmd_bind(c, body, in, 1);
	case RDMA_USER_CM_CMD_BIND:		return cmd_bind(c, body, in, 0);
	case RDMA_USER_CM_CMD_RESOLVE_IP:	return cmd_resolve_ip(c, body, in);
	case RDMA_USER_CM_CMD_RESOLVE_ADDR:	return cmd_resolve_addr(c, body, in);
	case RDMA_USER_CM_CMD_RESOLVE_ROUTE:	return cmd_resolve_route(c, body, in);
	case RDMA_USER_CM_CMD_QUERY_ROUTE:	return cmd_query_route(c, body, in, out);
	case RDMA_USER_CM_CMD_QUERY:		return cmd_query(c, body, in, out);
	case RDMA_USER_CM_CMD_LISTEN:		return cmd_listen(c, body, in);
	case RDMA_USER_CM_CMD_CONNECT:		return cmd_connect(c, body, in);
	case RDMA_USER_CM_CMD_ACCEPT:		return cmd_accept(c, body, in);
	case RDMA_USER_CM_CMD_REJECT:		return cmd_reject(c, body, in);
	case RDMA_USER_CM_CMD_DISCONNECT:	return cmd_disconnect(c, body, in);
	case RDMA_USER_CM_CMD_INIT_QP_ATTR:	return cmd_init_qp_attr(c, body, in, out);
	case RDMA_USER_CM_CMD_GET_EVENT:	return cmd_get_event(fd, c, body, in, out);
	case RDMA_USER_CM_CMD_MIGRATE_ID:	return cmd_migrate(c, body, in, out);
	case RDMA_USER_CM_CMD_SET_OPTION:	return cmd_set_option(c, body, in);
	case RDMA_USER_CM_CMD_NOTIFY:		return cmd_notify(c, body, in);
	/* Multicast: the device has none (docs/VERBS.md, "rdma_cm"). */
	case RDMA_USER_CM_CMD_JOIN_IP_MCAST:
	case RDMA_USER_CM_CMD_JOIN_MCAST:
	case RDMA_USER_CM_CMD_LEAVE_MCAST:
		return -EOPNOTSUPP;
	default:
		return -ENOSYS;
	}
}

ssize_t ff_rdmacm_write(int fd, const void *buf, size_t n)
{
	struct rdma_ucm_cmd_hdr hdr;
	struct cm_chan *c;
	int err;

	if (n < sizeof(hdr))
		return -EINVAL;
	if ((err = ff_user_read(&hdr, buf, sizeof(hdr))))
		return err;
	if (hdr.in + sizeof(hdr) > n)
		return -EINVAL;
	pthread_mutex_lock(&ff_cm.mu);
	c = cm_chan_of(fd);
	err = c ? dispatch(fd, c, hdr.cmd, (const char *)buf + sizeof(hdr), hdr.in, hdr.out) : -EBADF;
	pthread_mutex_unlock(&ff_cm.mu);
	return err ? err : (ssize_t)n;
}

