/* SPDX-License-Identifier: MIT */
/*
 * rdma_cm's channels, their events and the ids (calls/rdmacm.h): the
 * device's identity from the container's tree, the pseudo-terminal that
 * makes a channel pollable, what fork and close do to them.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "calls/rdmacm.h"

struct cm_state ff_cm = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .wake = { -1, -1 } };

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

	if (ff_cm.have_dev)
		return;
	if (read_dev_file("node_guid", buf, sizeof(buf)) || parse_groups(buf, g, 8) ||
	    read_dev_file("ports/1/gids/0", buf, sizeof(buf)) || parse_groups(buf, ff_cm.gid, 16) ||
	    read_dev_file("ports/1/lid", buf, sizeof(buf))) {
		ff_debug("rdma_cm: no verbs device ffv0 in the sysfs tree (SYSFS_PATH): ids get no device");
		return;
	}
	ff_cm.lid = (uint16_t)strtoul(buf, NULL, 16);
	memcpy(&ff_cm.guid, g, 8);
	ff_cm.have_dev = 1;
}

/* ---- channels and events ---- */

struct cm_chan *cm_chan_of(int fd)
{
	struct cm_chan *c;

	for (c = ff_cm.chans; c && c->fd != fd; c = c->next)
		;
	return c;
}

void cm_bell_sync(struct cm_chan *c, int had)
{
	int has = c->head != NULL;
	char b;

	if (c->bell < 0 || has == had)
		return;
	if (has)
		(void)!ff_real.write(c->bell, "e", 1);
	else
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

void cm_queue_event(struct cm_id *counted, struct cm_chan *c, uint64_t uid, uint32_t handle,
			uint32_t event, int status, const struct cm_msg *m)
{
	struct cm_event *e = calloc(1, sizeof(*e));
	struct rdma_ucm_conn_param *p;
	int had = c->head != NULL;

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
	cm_bell_sync(c, had);
	pthread_cond_broadcast(&ff_cm.cv);
}

void cm_id_event(struct cm_id *id, uint32_t event, int status, const struct cm_msg *m)
{
	cm_queue_event(id, id->ch, id->uid, id->handle, event, status, m);
}

/* Take id's queued events off its channel (it is going, or moving). */
void cm_unqueue(struct cm_id *id, struct cm_chan *to)
{
	struct cm_chan *c = id->ch;
	struct cm_event **pp = &c->head, *e;
	int had = c->head != NULL, to_had = to && to->head;

	while ((e = *pp)) {
		if (e->id != id) {
			pp = &e->next;
			continue;
		}
		*pp = e->next;
		if (to) {
			e->next = NULL;
			*to->tail = e;
			to->tail = &e->next;
		} else {
			free(e);
		}
	}
	for (c->tail = &c->head; *c->tail; c->tail = &(*c->tail)->next)
		;
	cm_bell_sync(c, had);
	if (to)
		cm_bell_sync(to, to_had);
}

/* A pty master in raw mode dup'ed over fd, its slave kept as the bell: fd becomes pollable (cm_bell_sync). */
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

void cm_id_free(struct cm_id *id);

/* The channel's file is closed: its ids go, as the kernel's do with the file (a connection's peer: DISCONNECTED). */
void cm_chan_drop(struct cm_chan *c)
{
	struct cm_chan **pp;
	struct cm_id *id;
	struct cm_event *e;

	/* From the start after each: a listener takes its accepted ids with it. */
	for (id = ff_cm.ids; id; id = id->ch == c ? (cm_id_free(id), ff_cm.ids) : id->next)
		;
	while ((e = c->head)) {		/* CONNECT_REQUESTs of ids already gone */
		c->head = e->next;
		free(e);
	}
	for (pp = &ff_cm.chans; *pp != c; pp = &(*pp)->next)
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
		cm_chan_drop(c);
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

	pthread_mutex_lock(&ff_cm.mu);
	if ((c = cm_chan_of(fd)))
		chan_close(c);
	pthread_mutex_unlock(&ff_cm.mu);
}

static void fork_prepare(void)
{
	pthread_mutex_lock(&ff_cm.mu);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&ff_cm.mu);
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

	if (ff_cm.wake[0] >= 0) {
		ff_real.close(ff_cm.wake[0]);
		ff_real.close(ff_cm.wake[1]);
		ff_cm.wake[0] = ff_cm.wake[1] = -1;
	}
	ff_cm.thread_on = 0;
	for (c = ff_cm.chans; c; c = c->next) {
		if (c->bell >= 0)
			ff_real.close(c->bell);
		c->bell = -1;
		c->waiters = 0;		/* threads of the parent's */
	}
	while (ff_cm.chans)
		cm_chan_drop(ff_cm.chans);
	pthread_mutex_unlock(&ff_cm.mu);
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
	pthread_mutex_lock(&ff_cm.mu);
	read_device();
	/* A channel whose fd was closed behind the library (close_range) and whose number came back. */
	if ((old = cm_chan_of(fd)))
		chan_close(old);
	c->next = ff_cm.chans;
	ff_cm.chans = c;
	pthread_mutex_unlock(&ff_cm.mu);
}

/* ---- ids ---- */

struct cm_id *cm_id_new(struct cm_chan *c, uint16_t ps)
{
	struct cm_id *id = calloc(1, sizeof(*id));

	if (!id)
		return NULL;
	id->ch = c;
	id->ps = ps;
	id->sock = -1;
	id->next = ff_cm.ids;
	ff_cm.ids = id;
	return id;
}

/* A handle for id: 0 or -ENOMEM. */
int cm_id_handle(struct cm_id *id)
{
	uint32_t h;

	for (h = 0; h < CM_MAX_IDS && ff_cm.by_handle[h]; h++)
		;
	if (h == CM_MAX_IDS)
		return -ENOMEM;
	ff_cm.by_handle[h] = id;
	id->handle = h;
	return 0;
}

void cm_id_free(struct cm_id *id)
{
	struct cm_id **pp, *a, *next;

	if (id->state != S_ACCEPTING) {
		cm_unqueue(id, NULL);
		ff_cm.by_handle[id->handle] = NULL;
	}
	for (a = ff_cm.ids; a; a = next) {
		next = a->next;
		if (a->listener == id)
			cm_id_free(a);
	}
	cm_close_sock(id);
	for (pp = &ff_cm.ids; *pp != id; pp = &(*pp)->next)
		;
	*pp = id->next;
	free(id);
}

struct cm_id *cm_id_of(struct cm_chan *c, uint32_t handle)
{
	struct cm_id *id = handle < CM_MAX_IDS ? ff_cm.by_handle[handle] : NULL;

	return id && id->ch == c ? id : NULL;
}

