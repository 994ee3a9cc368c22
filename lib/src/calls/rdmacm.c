/* SPDX-License-Identifier: MIT */
/*
 * rdma_cm on the virtual verbs device (docs/VERBS.md, "rdma_cm"). The
 * stock librdmacm opens /dev/infiniband/rdma_cm (in a container, /dev/null)
 * and writes commands to it: `struct rdma_ucm_cmd_hdr` and the command,
 * answers going through the command's response pointer. write() on such an
 * fd (FF_FD_RDMACM) comes here and is answered as the kernel's rdma_ucm
 * would, for the RC port spaces (RDMA_PS_TCP, RDMA_PS_IB over IPv4/IPv6).
 *
 * The connection manager's messages (REQ, REP, RTU, REJ, DREQ, DREP) go
 * over a plain TCP connection between the two processes, on the overlay:
 * an id bound to port P holds a TCP socket bound to P, so rdma_cm ports
 * share TCP's port space, as on iWARP. Each side puts its QPN, PSN, LID
 * and GID in its REQ or REP, so INIT_QP_ATTR gives the peer's identity
 * as its own device has it (whatever address the peer is reached at).
 * The sockets are the kernel's (ff_real), not the library's fast path.
 *
 * One thread per process serves the sockets (poll, asleep while nothing
 * happens); events queue per channel. GET_EVENT waits for one (EAGAIN
 * with O_NONBLOCK). So that poll() on the channel works as on the kernel's
 * file, the fd becomes the master of a pseudo-terminal in raw mode (still
 * a character device, which librdmacm checks), holding one byte per
 * queued event.
 *
 * Locking: one mutex (cm.mu) guards every channel, id and event; the
 * thread does its socket I/O under it (messages are small, sockets
 * non-blocking) and sleeps in poll without it; fork takes it (fork_child).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <termios.h>
#include <unistd.h>

#include <rdma/ib_user_ioctl_verbs.h>
#include <rdma/rdma_user_cm.h>

#include "calls/calls.h"

/* What the kernel's CM gives in a REJECTED event's status (IBTA reject reasons). */
enum { REJ_INVALID_SERVICE_ID = 8, REJ_CONSUMER_DEFINED = 28 };
enum { CM_MAX_IDS = 4096, CM_CONNECT_MS = 10000 };

/*
 * libibverbs's values, which INIT_QP_ATTR answers in (its ABI: enum
 * ibv_qp_attr_mask, ibv_qp_state, ibv_mtu); the library is built without
 * libibverbs's headers.
 */
enum {
	QP_STATE = 1 << 0, QP_ACCESS_FLAGS = 1 << 3, QP_PKEY_INDEX = 1 << 4, QP_PORT = 1 << 5,
	QP_AV = 1 << 7, QP_PATH_MTU = 1 << 8, QP_TIMEOUT = 1 << 9, QP_RETRY_CNT = 1 << 10,
	QP_RNR_RETRY = 1 << 11, QP_RQ_PSN = 1 << 12, QP_MAX_QP_RD_ATOMIC = 1 << 13,
	QP_MIN_RNR_TIMER = 1 << 15, QP_SQ_PSN = 1 << 16, QP_MAX_DEST_RD_ATOMIC = 1 << 17,
	QP_DEST_QPN = 1 << 20, QP_QKEY = 1 << 6,
};
enum { QPS_INIT = 1, QPS_RTR = 2, QPS_RTS = 3 };
enum { MTU_4096 = 5 };
/* The Q_Key of RDMA_PS_UDP ids (librdmacm's RDMA_UDP_QKEY), as the kernel's CM sets it. */
#define UDP_QKEY 0x01234567u
/* rdma_cm's events (enum rdma_cm_event_type, librdmacm's ABI). */
enum {
	EV_ADDR_RESOLVED, EV_ADDR_ERROR, EV_ROUTE_RESOLVED, EV_ROUTE_ERROR, EV_CONNECT_REQUEST,
	EV_CONNECT_RESPONSE, EV_CONNECT_ERROR, EV_UNREACHABLE, EV_REJECTED, EV_ESTABLISHED,
	EV_DISCONNECTED,
};

enum { M_REQ = 1, M_REP, M_RTU, M_REJ, M_DREQ, M_DREP };

/*
 * One CM message on the TCP connection; integers in network order. An RC
 * id's connection carries REQ, REP, RTU, then DREQ and DREP (or a REJ); a
 * UD id's only the REQ and the REP (or REJ), as IB's SIDR, and ends.
 */
struct cm_msg {
	uint8_t magic[4];		/* "FFCM" */
	uint8_t type, pd_len, resp_res, init_depth;
	uint8_t flow_control, retry, rnr_retry, srq;
	uint32_t qpn, psn, reason, qkey;
	uint16_t lid, pad;
	uint8_t gid[16];
	uint8_t pd[RDMA_MAX_PRIVATE_DATA];
};

enum state {
	S_IDLE, S_BOUND, S_ADDR, S_ROUTE, S_LISTEN,
	S_ACCEPTING,		/* accepted TCP connection, its REQ not in yet: no handle */
	S_CONNECTING,		/* TCP connect under way */
	S_REQ_SENT, S_REP_RCVD,	/* active */
	S_REQ_RCVD, S_REP_SENT,	/* passive */
	S_CONNECTED, S_DREQ_SENT, S_DONE,
};

struct cm_chan {
	struct cm_chan *next;
	int fd;
	int bell;			/* the pty's slave: one byte per queued event; -1 none */
	struct cm_event *head, **tail;
	int waiters;			/* threads in GET_EVENT */
};

struct cm_event {
	struct cm_event *next;
	struct cm_id *id;		/* whose count it is in */
	struct rdma_ucm_event_resp r;
};

struct cm_id {
	struct cm_id *next;
	uint32_t handle;
	uint64_t uid;
	struct cm_chan *ch;
	uint16_t ps;
	enum state state;
	int gone;			/* REQ_RCVD: the active side went away before ACCEPT */
	int sock;
	struct sockaddr_in6 src, dst;	/* sockaddr_in or sockaddr_in6, as the kernel keeps them */
	uint32_t reported;		/* events handed out by GET_EVENT */
	uint32_t psn;			/* our first PSN, in our REQ or REP and INIT_QP_ATTR's RTS */
	struct cm_id *listener;		/* S_ACCEPTING */
	struct cm_msg mine, peer;	/* our REQ or REP; the peer's */
	uint8_t rbuf[sizeof(struct cm_msg)];
	size_t rlen;
	int64_t deadline;		/* S_CONNECTING, ff_now_ms */
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;		/* an event was queued */
	struct cm_chan *chans;
	struct cm_id *ids;		/* all, accepting ones too */
	struct cm_id *by_handle[CM_MAX_IDS];
	int wake[2];			/* the thread's: a socket to watch came or changed */
	int thread_on;
	/* This process's device, from its sysfs tree. */
	int have_dev;
	uint64_t guid;			/* network order */
	uint16_t lid;
	uint8_t gid[16];
} cm = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .wake = { -1, -1 } };

/* ---- the device's identity (the files libibverbs reads, docs/VERBS.md "Discovery") ---- */

static int read_dev_file(const char *name, char *buf, size_t len)
{
	const char *root = getenv("SYSFS_PATH");
	char path[512];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/class/infiniband/ffv0/%s", root ? root : "/sys", name);
	if ((fd = ff_real.open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	n = ff_real.read(fd, buf, len - 1);
	ff_real.close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	return 0;
}

/* Groups of four hex digits ("02ff:ff00:...") into n bytes. */
static int parse_groups(const char *s, uint8_t *out, int n)
{
	unsigned g;
	int i;

	for (i = 0; i < n / 2; i++) {
		if (sscanf(s, "%4x", &g) != 1)
			return -1;
		out[2 * i] = (uint8_t)(g >> 8);
		out[2 * i + 1] = (uint8_t)g;
		s = strchr(s, ':');
		if (i + 1 < n / 2 && !s++)
			return -1;
	}
	return 0;
}

static void read_device(void)
{
	char buf[128];
	uint8_t g[8];

	if (cm.have_dev)
		return;
	if (read_dev_file("node_guid", buf, sizeof(buf)) || parse_groups(buf, g, 8) ||
	    read_dev_file("ports/1/gids/0", buf, sizeof(buf)) || parse_groups(buf, cm.gid, 16) ||
	    read_dev_file("ports/1/lid", buf, sizeof(buf))) {
		ff_debug("rdma_cm: no verbs device ffv0 in the sysfs tree (SYSFS_PATH): ids get no device");
		return;
	}
	cm.lid = (uint16_t)strtoul(buf, NULL, 16);
	memcpy(&cm.guid, g, 8);
	cm.have_dev = 1;
}

/* ---- channels and events ---- */

static struct cm_chan *chan_of(int fd)
{
	struct cm_chan *c;

	for (c = cm.chans; c && c->fd != fd; c = c->next)
		;
	return c;
}

static void bell_take(struct cm_chan *c)
{
	char b;

	if (c->bell >= 0)
		(void)!ff_real.read(c->fd, &b, 1);
}

/* A UD event's parameters: the sender's QP, its Q_Key, an address handle's attributes to reach it. */
static void ud_param(struct rdma_ucm_ud_param *u, const struct cm_msg *m)
{
	u->qp_num = ntohl(m->qpn);
	u->qkey = ntohl(m->qkey);
	u->private_data_len = m->pd_len;
	memcpy(u->private_data, m->pd, m->pd_len);
	u->ah_attr.dlid = ntohs(m->lid);
	u->ah_attr.is_global = 1;
	memcpy(u->ah_attr.grh.dgid, m->gid, 16);
	u->ah_attr.grh.hop_limit = 64;
	u->ah_attr.port_num = 1;
}

static void queue_event(struct cm_id *counted, struct cm_chan *c, uint64_t uid, uint32_t handle,
			uint32_t event, int status, const struct cm_msg *m)
{
	struct cm_event *e = calloc(1, sizeof(*e));
	struct rdma_ucm_conn_param *p;

	if (!e) {
		ff_debug("rdma_cm: no memory for an event: lost");
		return;
	}
	e->id = counted;
	e->r.uid = uid;
	e->r.id = handle;
	e->r.event = event;
	e->r.status = (uint32_t)status;
	if (m && counted->ps == RDMA_PS_UDP) {
		ud_param(&e->r.param.ud, m);
	} else if (m) {
		p = &e->r.param.conn;
		p->qp_num = ntohl(m->qpn);
		p->private_data_len = m->pd_len;
		memcpy(p->private_data, m->pd, m->pd_len);
		p->srq = m->srq;
		/* The peer's resources seen from this side, as the kernel swaps them. */
		p->responder_resources = m->init_depth;
		p->initiator_depth = m->resp_res;
		p->flow_control = m->flow_control;
		p->retry_count = m->retry;
		p->rnr_retry_count = m->rnr_retry;
		p->valid = 1;
	}
	*c->tail = e;
	c->tail = &e->next;
	if (c->bell >= 0)
		(void)!ff_real.write(c->bell, "e", 1);
	pthread_cond_broadcast(&cm.cv);
}

static void id_event(struct cm_id *id, uint32_t event, int status, const struct cm_msg *m)
{
	queue_event(id, id->ch, id->uid, id->handle, event, status, m);
}

/* Take id's queued events off its channel (it is going, or moving). */
static void unqueue(struct cm_id *id, struct cm_chan *to)
{
	struct cm_chan *c = id->ch;
	struct cm_event **pp = &c->head, *e;

	while ((e = *pp)) {
		if (e->id != id) {
			pp = &e->next;
			continue;
		}
		*pp = e->next;
		bell_take(c);
		if (to) {
			e->next = NULL;
			*to->tail = e;
			to->tail = &e->next;
			if (to->bell >= 0)
				(void)!ff_real.write(to->bell, "e", 1);
		} else {
			free(e);
		}
	}
	for (c->tail = &c->head; *c->tail; c->tail = &(*c->tail)->next)
		;
}

/* A pty master in raw mode dup'ed over fd, its slave kept as the bell: fd becomes pollable. */
static int make_bell(int fd)
{
	char name[64];
	struct termios t;
	int m, s = -1, fl = ff_real.fcntl(fd, F_GETFD);

	m = ff_real.open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m < 0 || unlockpt(m) || ptsname_r(m, name, sizeof(name)) ||
	    (s = ff_real.open(name, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0 || tcgetattr(s, &t))
		goto fail;
	cfmakeraw(&t);
	if (tcsetattr(s, TCSANOW, &t) || ff_real.dup3(m, fd, fl & FD_CLOEXEC ? O_CLOEXEC : 0) < 0)
		goto fail;
	ff_real.close(m);
	return s;
fail:
	ff_debug("rdma_cm: no pseudo-terminal (%s): the event channel fd %d is not pollable",
		 strerror(errno), fd);
	if (m >= 0)
		ff_real.close(m);
	if (s >= 0)
		ff_real.close(s);
	return -1;
}

static void id_free(struct cm_id *id);

/* The channel's file is closed: its ids go, as the kernel's do with the file (a connection's peer: DISCONNECTED). */
static void chan_drop(struct cm_chan *c)
{
	struct cm_chan **pp;
	struct cm_id *id;
	struct cm_event *e;

	/* From the start after each: a listener takes its accepted ids with it. */
	for (id = cm.ids; id; id = id->ch == c ? (id_free(id), cm.ids) : id->next)
		;
	while ((e = c->head)) {		/* CONNECT_REQUESTs of ids already gone */
		c->head = e->next;
		free(e);
	}
	for (pp = &cm.chans; *pp != c; pp = &(*pp)->next)
		;
	*pp = c->next;
	if (c->bell >= 0)
		ff_real.close(c->bell);
	free(c);
}

/*
 * c's fd is closed. As the kernel releases the file only once the writes
 * in progress on it returned, a channel with a thread asleep in GET_EVENT
 * (rping's CM thread, while its main thread tears down) stays, its ids
 * too, no longer found by its number (which may come back as another
 * file: its bell goes, so nothing reads that number); the last waiter
 * drops it. Otherwise it goes now.
 */
static void chan_close(struct cm_chan *c)
{
	if (!c->waiters) {
		chan_drop(c);
		return;
	}
	c->fd = -1;
	if (c->bell >= 0)
		ff_real.close(c->bell);
	c->bell = -1;
}

void ff_rdmacm_closed(int fd)
{
	struct cm_chan *c;

	pthread_mutex_lock(&cm.mu);
	if ((c = chan_of(fd)))
		chan_close(c);
	pthread_mutex_unlock(&cm.mu);
}

static void fork_prepare(void)
{
	pthread_mutex_lock(&cm.mu);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&cm.mu);
}

/*
 * A fork child does not use its parent's ids (docs/VERBS.md, "rdma_cm"):
 * it drops its copies of their sockets (or a parent that dies would leave
 * its peers connected) and of the channels' bells, and reads or writes
 * nothing it shares with the parent (the pseudo-terminals, the thread's
 * wake pipe). Its own ids, on channels it opens, get a thread of their own.
 */
static void fork_child(void)
{
	struct cm_chan *c;

	if (cm.wake[0] >= 0) {
		ff_real.close(cm.wake[0]);
		ff_real.close(cm.wake[1]);
		cm.wake[0] = cm.wake[1] = -1;
	}
	cm.thread_on = 0;
	for (c = cm.chans; c; c = c->next) {
		if (c->bell >= 0)
			ff_real.close(c->bell);
		c->bell = -1;
		c->waiters = 0;		/* threads of the parent's */
	}
	while (cm.chans)
		chan_drop(cm.chans);
	pthread_mutex_unlock(&cm.mu);
}

static void at_fork(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void ff_rdmacm_opened(int fd)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	struct cm_chan *c = calloc(1, sizeof(*c)), *old;

	if (!c)
		return;
	pthread_once(&once, at_fork);
	c->fd = fd;
	c->tail = &c->head;
	c->bell = make_bell(fd);
	pthread_mutex_lock(&cm.mu);
	read_device();
	/* A channel whose fd was closed behind the library (close_range) and whose number came back. */
	if ((old = chan_of(fd)))
		chan_close(old);
	c->next = cm.chans;
	cm.chans = c;
	pthread_mutex_unlock(&cm.mu);
}

/* ---- ids ---- */

static void wake_thread(void)
{
	if (cm.wake[1] >= 0)
		(void)!ff_real.write(cm.wake[1], "w", 1);
}

static void close_sock(struct cm_id *id)
{
	if (id->sock >= 0) {
		ff_real.close(id->sock);
		id->sock = -1;
		wake_thread();
	}
}

static struct cm_id *id_new(struct cm_chan *c, uint16_t ps)
{
	struct cm_id *id = calloc(1, sizeof(*id));

	if (!id)
		return NULL;
	id->ch = c;
	id->ps = ps;
	id->sock = -1;
	id->next = cm.ids;
	cm.ids = id;
	return id;
}

/* A handle for id: 0 or -ENOMEM. */
static int id_handle(struct cm_id *id)
{
	uint32_t h;

	for (h = 0; h < CM_MAX_IDS && cm.by_handle[h]; h++)
		;
	if (h == CM_MAX_IDS)
		return -ENOMEM;
	cm.by_handle[h] = id;
	id->handle = h;
	return 0;
}

static void id_free(struct cm_id *id)
{
	struct cm_id **pp, *a, *next;

	if (id->state != S_ACCEPTING) {
		unqueue(id, NULL);
		cm.by_handle[id->handle] = NULL;
	}
	for (a = cm.ids; a; a = next) {
		next = a->next;
		if (a->listener == id)
			id_free(a);
	}
	close_sock(id);
	for (pp = &cm.ids; *pp != id; pp = &(*pp)->next)
		;
	*pp = id->next;
	free(id);
}

static struct cm_id *id_of(struct cm_chan *c, uint32_t handle)
{
	struct cm_id *id = handle < CM_MAX_IDS ? cm.by_handle[handle] : NULL;

	return id && id->ch == c ? id : NULL;
}

/* ---- the TCP side ---- */

static void *cm_thread(void *arg);

static int start_thread(void)
{
	if (cm.thread_on)
		return 0;
	if (pipe2(cm.wake, O_NONBLOCK | O_CLOEXEC))
		return -errno;
	if (!ff_start_quiet_thread(cm_thread)) {
		ff_real.close(cm.wake[0]);
		ff_real.close(cm.wake[1]);
		cm.wake[0] = cm.wake[1] = -1;
		return -EAGAIN;
	}
	cm.thread_on = 1;
	return 0;
}

static socklen_t sa_len(const void *sa)
{
	return ((const struct sockaddr *)sa)->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
								  : sizeof(struct sockaddr_in);
}

static int family_ok(const void *sa)
{
	sa_family_t f = ((const struct sockaddr *)sa)->sa_family;

	return f == AF_INET || f == AF_INET6;
}

/* id gets a TCP socket bound to addr (port 0: one the kernel picks), as BIND_IP reserves it. */
static int bind_id(struct cm_id *id, const struct sockaddr_in6 *addr)
{
	socklen_t len = sizeof(id->src);
	int one = 1, s;

	if (id->state != S_IDLE)
		return -EINVAL;
	if (!family_ok(addr))
		return -EAFNOSUPPORT;
	s = ff_real.socket(addr->sin6_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	ff_real.setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	ff_real.setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (bind(s, (const struct sockaddr *)addr, sa_len(addr)) < 0 ||
	    ff_real.getsockname(s, (struct sockaddr *)&id->src, &len) < 0) {
		int err = errno;

		ff_real.close(s);
		return -err;
	}
	id->sock = s;
	id->state = S_BOUND;
	return 0;
}

static int is_any(const struct sockaddr_in6 *a)
{
	if (a->sin6_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr == htonl(INADDR_ANY);
	return !memcmp(&a->sin6_addr, &in6addr_any, sizeof(in6addr_any));
}

/* Whether id is on this device: bound to an address, resolved, or accepted (QUERY_ROUTE's node_guid). */
static int has_device(const struct cm_id *id)
{
	return cm.have_dev && id->state != S_IDLE && (id->state != S_BOUND || !is_any(&id->src)) &&
	       (id->state != S_LISTEN || !is_any(&id->src));
}

static int send_msg(struct cm_id *id, int type, const struct cm_msg *tmpl)
{
	struct cm_msg m;

	if (tmpl)
		m = *tmpl;
	else
		memset(&m, 0, sizeof(m));
	memcpy(m.magic, "FFCM", 4);
	m.type = (uint8_t)type;
	m.psn = htonl(id->psn);
	m.lid = htons(cm.lid);
	memcpy(m.gid, cm.gid, 16);
	if (id->sock < 0 ||
	    ff_real.send(id->sock, &m, sizeof(m), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(m))
		return -ECONNRESET;
	return 0;
}

/* The active side's connect failed: as the kernel's CM reports a REJ or a timeout. */
static void connect_failed(struct cm_id *id, int err)
{
	close_sock(id);
	id->state = S_DONE;
	if (err == ECONNREFUSED)
		id_event(id, EV_REJECTED, REJ_INVALID_SERVICE_ID, NULL);
	else
		id_event(id, EV_UNREACHABLE, -err, NULL);
}

/* The peer's end of the TCP connection went: what the kernel's CM would tell. */
static void peer_gone(struct cm_id *id)
{
	enum state st = id->state;

	close_sock(id);
	switch (st) {
	case S_ACCEPTING:
		id_free(id);
		return;
	case S_REQ_SENT:	/* the passive side destroyed its id: a REJ */
		id->state = S_DONE;
		id_event(id, EV_REJECTED, REJ_CONSUMER_DEFINED, NULL);
		return;
	case S_REQ_RCVD:
		id->gone = 1;
		return;
	case S_REP_SENT:
		id->state = S_DONE;
		id_event(id, EV_CONNECT_ERROR, -ECONNRESET, NULL);
		return;
	case S_REP_RCVD:
	case S_CONNECTED:
	case S_DREQ_SENT:
		id->state = S_DONE;
		id_event(id, EV_DISCONNECTED, 0, NULL);
		return;
	default:
		return;
	}
}

/* A first PSN (24 bits) of id's own, as the kernel's CM picks one at random. */
static uint32_t new_psn(const struct cm_id *id)
{
	return (uint32_t)(ff_now_ns() ^ (uintptr_t)id ^ ((uintptr_t)id >> 24)) & 0xffffff;
}

static void got_req(struct cm_id *id)
{
	struct cm_id *l = id->listener;

	if (id_handle(id)) {
		ff_debug("rdma_cm: %d ids already: a connect request refused", CM_MAX_IDS);
		peer_gone(id);
		return;
	}
	id->listener = NULL;
	id->ch = l->ch;
	id->uid = l->uid;
	id->state = S_REQ_RCVD;
	/* What INIT_QP_ATTR gives before the ACCEPT: the peer's resources seen from here. */
	id->psn = new_psn(id);
	id->mine.resp_res = id->peer.init_depth;
	id->mine.init_depth = id->peer.resp_res;
	queue_event(l, l->ch, l->uid, id->handle, EV_CONNECT_REQUEST, 0, &id->peer);
}

static void got_msg(struct cm_id *id)
{
	struct cm_msg *m = &id->peer;
	int t;

	memcpy(m, id->rbuf, sizeof(*m));
	id->rlen = 0;
	t = memcmp(m->magic, "FFCM", 4) ? 0 : m->type;
	if (id->state == S_ACCEPTING && t == M_REQ) {
		got_req(id);
	} else if (id->state == S_REQ_SENT && t == M_REP && id->ps == RDMA_PS_UDP) {
		close_sock(id);		/* SIDR's exchange is over */
		id->state = S_DONE;
		id_event(id, EV_ESTABLISHED, 0, m);
	} else if (id->state == S_REQ_SENT && t == M_REP) {
		id->state = S_REP_RCVD;
		id_event(id, EV_CONNECT_RESPONSE, 0, m);
	} else if (id->state == S_REQ_SENT && t == M_REJ) {
		close_sock(id);
		id->state = S_DONE;
		id_event(id, EV_REJECTED, (int)ntohl(m->reason), m);
	} else if (id->state == S_REP_SENT && t == M_RTU) {
		id->state = S_CONNECTED;
		id_event(id, EV_ESTABLISHED, 0, m);
	} else if ((id->state == S_CONNECTED || id->state == S_REP_SENT ||
		    id->state == S_REP_RCVD || id->state == S_DREQ_SENT) && t == M_DREQ) {
		send_msg(id, M_DREP, NULL);
		close_sock(id);
		id->state = S_DONE;
		id_event(id, EV_DISCONNECTED, 0, NULL);
	} else if (id->state == S_DREQ_SENT && t == M_DREP) {
		close_sock(id);
		id->state = S_DONE;
		id_event(id, EV_DISCONNECTED, 0, NULL);
	} else {
		ff_debug("rdma_cm: message %d in state %d: connection dropped", t, id->state);
		peer_gone(id);
	}
}

static void on_ready(struct cm_id *id, short rev)
{
	ssize_t n;
	int err = 0, s;
	socklen_t len = sizeof(err);

	switch (id->state) {
	case S_LISTEN:
		s = ff_real.accept4(id->sock, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (s >= 0) {
			struct cm_id *a = id_new(id->ch, id->ps);
			socklen_t l1 = sizeof(a->src), l2 = sizeof(a->dst);

			if (!a) {
				ff_real.close(s);
				return;
			}
			a->state = S_ACCEPTING;
			a->listener = id;
			a->sock = s;
			ff_real.setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int));
			ff_real.getsockname(s, (struct sockaddr *)&a->src, &l1);
			ff_real.getpeername(s, (struct sockaddr *)&a->dst, &l2);
		}
		return;
	case S_CONNECTING:
		if (ff_real.getsockopt(id->sock, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
			err = errno;
		if (err) {
			connect_failed(id, err);
			return;
		}
		len = sizeof(id->src);
		ff_real.getsockname(id->sock, (struct sockaddr *)&id->src, &len);
		if (send_msg(id, M_REQ, &id->mine)) {
			connect_failed(id, ECONNRESET);
			return;
		}
		id->state = S_REQ_SENT;
		return;
	default:
		break;
	}
	(void)rev;
	n = ff_real.recv(id->sock, id->rbuf + id->rlen, sizeof(id->rbuf) - id->rlen, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		peer_gone(id);
		return;
	}
	id->rlen += (size_t)n;
	if (id->rlen == sizeof(id->rbuf))
		got_msg(id);
}

static int watched(const struct cm_id *id)
{
	return id->sock >= 0 && id->state != S_BOUND && id->state != S_ADDR && id->state != S_ROUTE &&
	       id->state != S_DONE;
}

/* The sockets' thread: asleep in poll until a socket or the wake pipe is ready, or a connect's deadline. */
static void *cm_thread(void *arg)
{
	struct pollfd *p = NULL;
	struct cm_id **who = NULL, *id;
	size_t cap = 0, n, i;
	int64_t now, next;
	char buf[64];

	(void)arg;
	pthread_mutex_lock(&cm.mu);
	for (;;) {
		n = 1;
		for (id = cm.ids; id; id = id->next)
			n++;
		if (n > cap) {
			cap = n * 2;
			p = realloc(p, cap * sizeof(*p));
			who = realloc(who, cap * sizeof(*who));
			if (!p || !who)
				abort();
		}
		p[0] = (struct pollfd){ .fd = cm.wake[0], .events = POLLIN };
		n = 1;
		now = ff_now_ms();
		next = -1;
		for (id = cm.ids; id; id = id->next) {
			if (!watched(id))
				continue;
			if (id->state == S_CONNECTING) {
				if (id->deadline <= now) {
					connect_failed(id, ETIMEDOUT);
					continue;
				}
				if (next < 0 || id->deadline - now < next)
					next = id->deadline - now;
			}
			who[n] = id;
			p[n++] = (struct pollfd){ .fd = id->sock,
						  .events = id->state == S_CONNECTING ? POLLOUT : POLLIN };
		}
		pthread_mutex_unlock(&cm.mu);
		ff_real.poll(p, n, (int)next);
		pthread_mutex_lock(&cm.mu);
		while (ff_real.read(cm.wake[0], buf, sizeof(buf)) > 0)
			;
		for (i = 1; i < n; i++) {
			if (!p[i].revents)
				continue;
			/* Still there, with that socket (an id may have gone while unlocked). */
			for (id = cm.ids; id && id != who[i]; id = id->next)
				;
			if (id && id->sock == p[i].fd && watched(id))
				on_ready(id, p[i].revents);
		}
	}
	return NULL;
}

/* ---- the commands ---- */

/* Copy the command body (in bytes given) into cmd, zero-padded; -errno. */
static int get_cmd(void *cmd, size_t size, const void *body, size_t in)
{
	memset(cmd, 0, size);
	return ff_user_read(cmd, body, in < size ? in : size);
}

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
	r->node_guid = cm.guid;
	r->port_num = 1;
	memcpy(pr->sgid, cm.gid, 16);
	pr->slid = htons(cm.lid);
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
		a->timeout = 14;
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
	if (!(id = id_new(c, cmd.ps)))
		return -ENOMEM;
	if ((err = id_handle(id))) {
		id->state = S_ACCEPTING;	/* no handle to give back */
		id_free(id);
		return err;
	}
	id->uid = cmd.uid;
	r.id = id->handle;
	if ((err = put_resp(cmd.response, &r, sizeof(r), out)))
		id_free(id);
	return err;
}

static int cmd_destroy(struct cm_chan *c, const void *body, size_t in, size_t out)
{
	struct rdma_ucm_destroy_id cmd;
	struct rdma_ucm_destroy_id_resp r = { 0 };
	struct cm_id *id;
	int err = get_cmd(&cmd, sizeof(cmd), body, in);

	if (err)
		return err;
	if (!(id = id_of(c, cmd.id)))
		return -EINVAL;
	r.events_reported = id->reported;
	/* A connection still up: closing it is the peer's DISCONNECTED (the kernel sends a DREQ). */
	id_free(id);
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
		id = id_of(c, bi.id);
		a = bi.addr;
	} else {
		if ((err = get_cmd(&b, sizeof(b), body, in)))
			return err;
		id = id_of(c, b.id);
		if (!family_ok(&b.addr))
			return -EAFNOSUPPORT;	/* AF_IB: librdmacm then speaks IP */
		memcpy(&a, &b.addr, sizeof(a));
	}
	return id ? bind_id(id, &a) : -EINVAL;
}

static int resolve(struct cm_chan *c, uint32_t h, const void *src, const void *dst)
{
	struct cm_id *id = id_of(c, h);
	struct sockaddr_in6 any = { 0 };
	int err;

	if (!id)
		return -EINVAL;
	if (!family_ok(dst))
		return -EAFNOSUPPORT;
	if (id->state == S_IDLE) {
		if (family_ok(src) && ((const struct sockaddr *)src)->sa_family ==
				      ((const struct sockaddr *)dst)->sa_family)
			memcpy(&any, src, sa_len(src));
		else
			any.sin6_family = ((const struct sockaddr *)dst)->sa_family;
		if ((err = bind_id(id, &any)))
			return err;
	}
	if (id->state != S_BOUND && id->state != S_ADDR)
		return -EINVAL;
	memset(&id->dst, 0, sizeof(id->dst));
	memcpy(&id->dst, dst, sa_len(dst));
	if (!cm.have_dev) {
		id_event(id, EV_ADDR_ERROR, -ENODEV, NULL);
		return 0;
	}
	id->state = S_ADDR;
	id_event(id, EV_ADDR_RESOLVED, 0, NULL);
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
	int err = get_cmd(&cmd, sizeof(cmd), body, in);

	if (err)
		return err;
	if (!(id = id_of(c, cmd.id)) || (id->state != S_ADDR && id->state != S_ROUTE))
		return -EINVAL;
	id->state = S_ROUTE;
	id_event(id, EV_ROUTE_RESOLVED, 0, NULL);
	return 0;
}

static int cmd_query_route(struct cm_chan *c, const void *body, size_t in, size_t out)
{
	struct rdma_ucm_query cmd;
	struct rdma_ucm_query_route_resp r;
	struct cm_id *id;
	int err = get_cmd(&cmd, sizeof(cmd), body, in);

	if (err)
		return err;
	if (!(id = id_of(c, cmd.id)))
		return -EINVAL;
	memset(&r, 0, sizeof(r));
	fill_route(id, &r);
	return put_resp(cmd.response, &r, sizeof(r), out);
}

static int cmd_query(struct cm_chan *c, const void *body, size_t in, size_t out)
{
	struct rdma_ucm_query cmd;
	struct rdma_ucm_query_addr_resp r;
	struct cm_id *id;
	int err = get_cmd(&cmd, sizeof(cmd), body, in);

	if (err)
		return err;
	if (!(id = id_of(c, cmd.id)))
		return -EINVAL;
	if (cmd.option != RDMA_USER_CM_QUERY_ADDR)
		return -ENOSYS;		/* PATH and GID: for AF_IB ids, which this device has not */
	memset(&r, 0, sizeof(r));
	r.src_size = (uint16_t)(id->src.sin6_family ? sa_len(&id->src) : 0);
	r.dst_size = (uint16_t)(id->dst.sin6_family ? sa_len(&id->dst) : 0);
	memcpy(&r.src_addr, &id->src, sizeof(id->src));
	memcpy(&r.dst_addr, &id->dst, sizeof(id->dst));
	r.ibdev_index = UINT32_MAX;
	if (has_device(id)) {
		r.node_guid = cm.guid;
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
	int err = get_cmd(&cmd, sizeof(cmd), body, in);

	if (err)
		return err;
	if (!(id = id_of(c, cmd.id)))
		return -EINVAL;
	if (id->state == S_IDLE && (err = bind_id(id, &any)))
		return err;
	if (id->state == S_LISTEN)
		return 0;
	if (id->state != S_BOUND)
		return -EINVAL;
	if ((err = start_thread()))
		return err;
	if (ff_real.listen(id->sock, cmd.backlog > 0 ? (int)cmd.backlog : 128) < 0)
		return -errno;
	id->state = S_LISTEN;
	wake_thread();
	return 0;
}

static int cmd_connect(struct cm_chan *c, const void *body, size_t in)
{
	struct rdma_ucm_connect cmd;
	struct cm_id *id;
	int err = get_cmd(&cmd, sizeof(cmd), body, in);

	if (err)
		return err;
	if (!(id = id_of(c, cmd.id)) || id->state != S_ROUTE)
		return -EINVAL;
	if ((err = start_thread()))
		return err;
	conn_to_msg(&id->mine, &cmd.conn_param);
	id->psn = new_psn(id);
	id->state = S_CONNECTING;
	id->deadline = ff_now_ms() + CM_CONNECT_MS;
	if (ff_real.connect(id->sock, (struct sockaddr *)&id->dst, sa_len(&id->dst)) < 0 &&
	    errno != EINPROGRESS)
		connect_failed(id, errno);	/* told as an event, as the kernel's CM does */
	wake_thread();
	return 0;
}

static int cmd_accept(struct cm_chan *c, const void *body, size_t in)
{
	struct rdma_ucm_accept cmd;
	struct cm_id *id;
	int err = get_cmd(&cmd, sizeof(cmd), body, in);

	if (err)
		return err;
	if (!(id = id_of(c, cmd.id)))
		return -EINVAL;
	if (id->state == S_REP_RCVD) {		/* the active side's RTU */
		if (send_msg(id, M_RTU, NULL))
			peer_gone(id);
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
		send_msg(id, M_REP, &id->mine);
		close_sock(id);
		id->state = S_DONE;
		return 0;
	}
	id->state = S_REP_SENT;
	if (id->gone || send_msg(id, M_REP, &id->mine))
		peer_gone(id);
	return 0;
}

static int cmd_reject(struct cm_chan *c, const void *body, size_t in)
{
	struct rdma_ucm_reject cmd;
	struct cm_msg m = { 0 };
	struct cm_id *id;
	int err = get_cmd(&cmd, sizeof(cmd), body, in);

	if (err)
		return err;
	if (!(id = id_of(c, cmd.id)) || id->state != S_REQ_RCVD)
		return -EINVAL;
	m.reason = htonl(REJ_CONSUMER_DEFINED);
	m.pd_len = cmd.private_data_len;
	memcpy(m.pd, cmd.private_data, cmd.private_data_len);
	send_msg(id, M_REJ, &m);
	close_sock(id);
	id->state = S_DONE;
	return 0;
}

static int cmd_disconnect(struct cm_chan *c, const void *body, size_t in)
{
	struct rdma_ucm_disconnect cmd;
	struct cm_id *id;
	int err = get_cmd(&cmd, sizeof(cmd), body, in);

	if (err)
		return err;
	if (!(id = id_of(c, cmd.id)))
		return -EINVAL;
	switch (id->state) {
	case S_CONNECTED:
	case S_REP_SENT:
	case S_REP_RCVD:
		id->state = S_DREQ_SENT;
		if (send_msg(id, M_DREQ, NULL))
			peer_gone(id);
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
	int err = get_cmd(&cmd, sizeof(cmd), body, in);

	if (err)
		return err;
	if (!(id = id_of(c, cmd.id)))
		return -EINVAL;
	if ((err = init_qp_attr(id, cmd.qp_state, &a)))
		return err;
	return put_resp(cmd.response, &a, sizeof(a), out);
}

/* A GET_EVENT leaves c (returning, or its thread cancelled): the last one out of a closed channel drops it. */
static void get_event_done(struct cm_chan *c)
{
	if (!--c->waiters && c->fd < 0)
		chan_drop(c);
}

static void get_event_cancelled(void *c)
{
	get_event_done(c);
	pthread_mutex_unlock(&cm.mu);
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
		pthread_cond_wait(&cm.cv, &cm.mu);
	pthread_cleanup_pop(0);
	if (!(e = c->head))
		err = -EAGAIN;
	else if (!(err = put_resp(cmd.response, &e->r, sizeof(e->r), out))) {
		c->head = e->next;
		if (!c->head)
			c->tail = &c->head;
		bell_take(c);
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
	if (!(from = chan_of((int)cmd.fd)) || !(id = id_of(from, cmd.id)))
		return -EINVAL;
	if (from != c) {
		unqueue(id, c);
		id->ch = c;
	}
	r.events_reported = id->reported;
	return put_resp(cmd.response, &r, sizeof(r), out);
}

/* A command that only names an id (SET_OPTION, NOTIFY): the id must be this channel's. */
static int cmd_id_only(struct cm_chan *c, const void *body, size_t in, size_t off)
{
	uint32_t h;
	int err;

	if (in < off + sizeof(h))
		return -EINVAL;
	if ((err = ff_user_read(&h, (const char *)body + off, sizeof(h))))
		return err;
	return id_of(c, h) ? 0 : -EINVAL;
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
	/* Options are the kernel's tuning (TOS, REUSEADDR, AFONLY, ACK_TIMEOUT, IB_PATH): taken, no effect. */
	case RDMA_USER_CM_CMD_SET_OPTION:
		return cmd_id_only(c, body, in, offsetof(struct rdma_ucm_set_option, id));
	case RDMA_USER_CM_CMD_NOTIFY:
		return cmd_id_only(c, body, in, offsetof(struct rdma_ucm_notify, id));
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
	pthread_mutex_lock(&cm.mu);
	c = chan_of(fd);
	err = c ? dispatch(fd, c, hdr.cmd, (const char *)buf + sizeof(hdr), hdr.in, hdr.out) : -EBADF;
	pthread_mutex_unlock(&cm.mu);
	return err ? err : (ssize_t)n;
}
