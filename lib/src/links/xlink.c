/* SPDX-License-Identifier: MIT */
/*
 * Cross-host links: cross-host connections set up without the agents
 * (docs/PROTOCOL.md, "Cross-host links"; at length: docs/BROKERING.md,
 * "Cross-host links in the library").
 *
 * Design note.
 * - The connecting process keeps a stock of TCP connections to the
 *   acceptor's link listener, which its agent dials on LINK_FILL, asked for
 *   when the stock runs low on a session of its own; only an empty stock
 *   waits for it.
 * - The connector writes LINK_OFFER on a stock connection before its SYN
 *   leaves; accept() answers the one for its 4-tuple with LINK_TAKE; the
 *   connector commits (LINK_COMMIT) only within OFFER_WAIT_MS of its offer,
 *   and the acceptor waits COMMIT_WAIT_MS for it. Anything else closes the
 *   stock connection, and both ends ask their agents.
 * - Every message on a stock connection is read exactly (peeked whole, then
 *   consumed), so what follows LINK_COMMIT is the application's.
 * - The accepting side watches its links through one epoll set of the
 *   library's; a blocking accept() answers offers as they come.
 * - Trust: an offer is taken only with the link's token, and only for a
 *   connection from the link's connector address to its listener's port.
 * - Links expire (LINK_TTL, the acceptor GRACE_MS later) even in a process
 *   that never calls the library again: a thread, the reaper, closes them.
 *
 * Locking: mu guards the table and is never held across a wait or an agent
 * round trip; fill_mu guards the fill session and the sockets to close
 * later, and is taken before mu; link.c's lock is taken before both (fork).
 * Neither is taken under the fd table's lock (fdtable.c takes that one
 * under them).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "agent/agent.h"
#include "core/core.h"
#include "freeflow/proto.h"
#include "links/links.h"

#define XLINK_MAX	64	/* cross-host links of one process, both roles */
#define STOCK_MAX	32	/* connector: stock connections a link holds */
#define FILL_COUNT	16	/* asked for at once (the protocol's most) */
#define FILL_LOW	8	/* ask for a fill when the stock is down to this */
#define FILL_WAIT_MS	250	/* an empty stock's wait for its fill, as for any answer */
#define HELD_MAX	64	/* acceptor: stock connections a link holds */
#define OFFER_WAIT_MS	5	/* the connector commits only this soon after its offer */
#define COMMIT_WAIT_MS	40	/* the acceptor's wait for the commit */
#define GRACE_MS	1000	/* the acceptor keeps a link this much past LINK_TTL */
#define MSG_CAP		(FF_HDR_LEN + 3 * FF_ATTR_HDR_LEN + 2 * FF_EP6_LEN + FF_TOKEN_LEN)	/* LINK_OFFER */

/* HELD_TAKEN: LINK_TAKE sent before accept() returned the connection (ff_xlink_before_accept). */
enum { HELD_READY, HELD_OFFERED, HELD_TAKEN };

/* A stock connection on the accepting side, and what came on it so far. */
struct held {
	int fd;
	int state;
	struct ep conn, acc;	/* HELD_OFFERED, HELD_TAKEN: the offered 4-tuple */
	int64_t taken;		/* HELD_TAKEN: when, ms */
};

struct xlink {
	int used;
	int acceptor;
	uint64_t id;		/* tells a reused slot apart */
	struct ep self;		/* connector: our address (port unused); acceptor: our listener */
	struct ep peer;		/* connector: the acceptor endpoint; acceptor: the connector (port unused) */
	int64_t expires;	/* ms, CLOCK_MONOTONIC */
	/* connector */
	uint64_t name;		/* the agent's name for the link */
	uint8_t token[FF_TOKEN_LEN];	/* both: the link's secret, in each offer */
	int stock[STOCK_MAX];
	int nstock;
	/* acceptor */
	int listener;
	int lis_on;		/* the listener is watched (it is not, while held is full) */
	struct held held[HELD_MAX];
	int nheld;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct xlink xl[XLINK_MAX];
static uint64_t next_id = 1;
static _Atomic int any;

/* The fill session, and the one fill it may have out (fill_mu). */
static pthread_mutex_t fill_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ff_agent fill_agent = { .fd = -1 };
static pid_t fill_pid;
static uint64_t fill_for;	/* the id of the link it is for; 0: none out */
static uint32_t fill_seq;
static _Atomic int fill_out;	/* fill_for != 0, read without the lock */

/* Overlay sockets to close later (fill_mu): ff_xlink_close_later. */
#define LATER_MAX	16
static int later[LATER_MAX];
static int nlater;

/* The accepting side's epoll set (mu); a fork child forgets it (ff_xlinks_after_fork). */
static int ep = -1;

static int64_t expire(void);
static void *reap(void *arg);
static struct ff_reaper reaper = { .mu = &mu, .outer = &fill_mu, .expire = expire, .thread = reap };

int ff_xlinks_any(void)
{
	return atomic_load_explicit(&any, memory_order_relaxed);
}

static int ep_live(void);
static void ep_watch(int fd, int op, uint32_t events);

/* Stop watching fd (mu held), before it is closed or handed on. */
static void ep_del(int fd)
{
	if (ep_live())
		ff_real.epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
}

/* Close a stock connection the accepting side holds (mu held). */
static void held_close(const struct held *h)
{
	if (h->state != HELD_TAKEN)
		ep_del(h->fd);
	ff_real.close(h->fd);
}

/* mu held. */
static void xlink_close(struct xlink *l)
{
	for (int i = 0; i < l->nstock; i++)
		ff_real.close(l->stock[i]);
	for (int i = 0; i < l->nheld; i++)
		held_close(&l->held[i]);
	if (l->acceptor) {
		ep_del(l->listener);
		ff_real.close(l->listener);
	}
	l->used = 0;
	l->nstock = l->nheld = 0;
}

/* A free slot (mu held), after closing expired links, or NULL. */
static struct xlink *free_slot(void)
{
	int64_t now = ff_now_ms();
	struct xlink *f = NULL;

	for (int i = 0; i < XLINK_MAX; i++) {
		if (xl[i].used && xl[i].expires <= now)
			xlink_close(&xl[i]);
		if (!xl[i].used && !f)
			f = &xl[i];
	}
	return f;
}

static void close_now(void);

/* Close the links that expired (fill_mu and mu held); the next expiry, 0 if no link is left. */
static int64_t expire(void)
{
	int64_t now = ff_now_ms(), next = 0;

	close_now();
	for (int i = 0; i < XLINK_MAX; i++) {
		if (!xl[i].used)
			continue;
		if (xl[i].expires <= now)
			xlink_close(&xl[i]);
		else if (!next || xl[i].expires < next)
			next = xl[i].expires;
	}
	return next;
}

static void *reap(void *arg)
{
	(void)arg;
	return ff_reaper_run(&reaper);
}

void ff_xlink_add(const struct sockaddr_storage *local, const struct sockaddr_storage *remote,
		  uint32_t ttl_ms, uint64_t name, int listener, const uint8_t *token)
{
	struct xlink k = { .used = 1, .acceptor = listener >= 0, .name = name,
			   .listener = listener };
	struct xlink *l;

	/* take_stock() accepts what waits, never waits itself. */
	if (to_ep(local, &k.self) || to_ep(remote, &k.peer) ||
	    (listener >= 0 && ff_real.fcntl(listener, F_SETFL, O_NONBLOCK) < 0)) {
		if (listener >= 0)
			ff_real.close(listener);
		return;
	}
	k.expires = ff_now_ms() + ttl_ms + (k.acceptor ? GRACE_MS : 0);
	memcpy(k.token, token, FF_TOKEN_LEN);
	pthread_mutex_lock(&mu);
	/* A newer connector link to the same endpoint replaces the older. */
	for (int i = 0; i < XLINK_MAX && !k.acceptor; i++)
		if (xl[i].used && !xl[i].acceptor && ep_eq(&xl[i].peer, &k.peer))
			xlink_close(&xl[i]);
	l = free_slot();
	if (l) {
		k.id = next_id++;
		k.lis_on = k.acceptor;
		*l = k;
		if (k.acceptor && ep_live())
			ep_watch(listener, EPOLL_CTL_ADD, EPOLLIN);
		atomic_store(&any, 1);
		ff_reaper_kick(&reaper, k.expires);
	} else if (listener >= 0) {
		ff_real.close(listener);
	}
	pthread_mutex_unlock(&mu);
}

/* The slot that still holds link id (mu held), or NULL. */
static struct xlink *by_id(uint64_t id)
{
	for (int i = 0; i < XLINK_MAX; i++)
		if (xl[i].used && xl[i].id == id)
			return &xl[i];
	return NULL;
}

/*
 * Read one whole message from fd into buf, never more, waiting until
 * deadline (ms; 0: no wait). 1 read (m decoded), 0 nothing there yet (only
 * without a deadline), -1 EOF, error, timeout or malformed. Each message is
 * one small write, so part of one, without a wait, is a peer that does not
 * follow the protocol (and would keep a poll() that watches it spinning).
 */
static int read_msg(int fd, uint8_t *buf, size_t cap, int64_t deadline, struct ff_msg *m)
{
	for (;;) {
		ssize_t n = ff_real.recv(fd, buf, cap, MSG_PEEK | MSG_DONTWAIT);
		size_t need = FF_HDR_LEN;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int64_t left;

		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			return -1;
		if (n >= FF_HDR_LEN) {
			need += (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 |
				(size_t)buf[11] << 24;
			if (need > cap)
				return -1;
		}
		if (n > 0 && (size_t)n >= need)
			return ff_real.recv(fd, buf, need, MSG_DONTWAIT) == (ssize_t)need &&
			       !ff_msg_decode(buf, need, m) ? 1 : -1;
		if (!deadline)
			return n > 0 ? -1 : 0;
		if ((left = deadline - ff_now_ms()) <= 0)
			return -1;
		ff_real.poll(&p, 1, (int)left);
	}
}

static int send_bare(int fd, uint8_t type)
{
	uint8_t buf[FF_HDR_LEN];
	struct ff_enc e;
	int n;

	ff_enc_start(&e, buf, sizeof(buf), type, 0);
	n = ff_enc_finish(&e);
	return n > 0 && ff_real.send(fd, buf, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) == n ? 0 : -1;
}

/* ---- the connecting side ---- */

/* The usable connector link to dst (mu held), or NULL; closes an expired one. */
static struct xlink *connector_link(const struct ep *dst)
{
	int64_t now = ff_now_ms();

	for (int i = 0; i < XLINK_MAX; i++) {
		struct xlink *l = &xl[i];

		if (!l->used || l->acceptor || !ep_eq(&l->peer, dst))
			continue;
		if (l->expires > now)
			return l;
		xlink_close(l);
	}
	return NULL;
}

/* The stock of link id (mu taken here), or -1 if the link is gone. */
static int stock_of(uint64_t id)
{
	struct xlink *l;
	int n;

	pthread_mutex_lock(&mu);
	l = by_id(id);
	n = l ? l->nstock : -1;
	pthread_mutex_unlock(&mu);
	return n;
}

/*
 * The fill session is done with (fill_mu held). ff_agent_close unmarks and
 * closes it, as it did if ff_agent closed it on an error (close_fd).
 */
static void fill_session_end(void)
{
	ff_agent_close(&fill_agent);
}

/*
 * Take the answer to the fill that is out, waiting at most wait_ms
 * (fill_mu held): its stock goes to its link; a link the agent no longer
 * knows is closed.
 */
static void fill_take(int wait_ms)
{
	struct ff_reply r;
	struct xlink *l;
	int fds[FILL_COUNT], n = -EBADF;

	if (!fill_for)
		return;
	/* A session whose number the application took back is not read. */
	if (ff_control_own_valid(&fill_agent, fill_pid))
		n = ff_agent_await(&fill_agent, fill_seq, FF_MSG_PATH, &r, wait_ms);
	if (n == -EAGAIN)
		return;
	if (n < 0)
		fill_session_end();
	else
		n = ff_link_fill_read(&r, fds, FILL_COUNT);
	pthread_mutex_lock(&mu);
	l = by_id(fill_for);
	if (n == -ENOENT && l) {
		ff_debug("cross-host link: the agent no longer knows it");
		xlink_close(l);
		l = NULL;
	}
	for (int i = 0; i < n; i++) {
		if (l && l->nstock < STOCK_MAX)
			l->stock[l->nstock++] = fds[i];
		else
			ff_real.close(fds[i]);
	}
	pthread_mutex_unlock(&mu);
	fill_for = 0;
	atomic_store(&fill_out, 0);
}

/* Ask for a fill of link id, named name, unless one is out (fill_mu held). */
static void fill_ask(uint64_t id, uint64_t name)
{
	int64_t seq;

	if (fill_for)
		return;
	if (!ff_control_own_valid(&fill_agent, fill_pid)) {
		if (ff_control_open_own(&fill_agent, 0))
			return;
		fill_pid = getpid();
	}
	seq = ff_link_fill_send(&fill_agent, name, FILL_COUNT);
	if (seq < 0) {
		fill_session_end();
		return;
	}
	fill_seq = (uint32_t)seq;
	fill_for = id;
	atomic_store(&fill_out, 1);
}

/*
 * Keep link id's stock coming: take a fill that came, ask for one when the
 * stock runs low, and wait for it only when the stock is empty.
 */
static void restock(uint64_t id, uint64_t name)
{
	int n;

	pthread_mutex_lock(&fill_mu);
	fill_take(0);
	n = stock_of(id);
	if (n >= 0 && n <= FILL_LOW)
		fill_ask(id, name);
	if (n == 0 && fill_for == id)
		fill_take(FILL_WAIT_MS);
	pthread_mutex_unlock(&fill_mu);
}

static int send_offer(int s, const struct ep *conn, const struct ep *acc, const uint8_t *token)
{
	uint8_t buf[MSG_CAP];
	struct ff_enc e;
	int n;

	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_LINK_OFFER, 0);
	ff_enc_attr(&e, FF_ATTR_LOCAL_EP, conn->b, conn->len);
	ff_enc_attr(&e, FF_ATTR_REMOTE_EP, acc->b, acc->len);
	ff_enc_attr(&e, FF_ATTR_TOKEN, token, FF_TOKEN_LEN);
	n = ff_enc_finish(&e);
	if (n < 0)
		return n;
	return ff_real.send(s, buf, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) == n ? 0 : -errno;
}

int ff_xlink_offer(int fd, const struct ep *to, struct ff_offer *o)
{
	struct xlink *l;
	struct ep self, from;
	uint8_t token[FF_TOKEN_LEN];
	uint64_t id, name;
	int s = -1, ret, low;

	pthread_mutex_lock(&mu);
	l = connector_link(to);
	id = l ? l->id : 0;
	name = l ? l->name : 0;
	low = l && l->nstock <= FILL_LOW;
	pthread_mutex_unlock(&mu);
	if (!l)
		return -ENOENT;
	if (low || atomic_load_explicit(&fill_out, memory_order_relaxed))
		restock(id, name);
	pthread_mutex_lock(&mu);
	l = by_id(id);
	if (l && l->nstock > 0) {
		s = l->stock[--l->nstock];
		self = l->self;
		memcpy(token, l->token, FF_TOKEN_LEN);
	}
	pthread_mutex_unlock(&mu);
	if (s < 0)
		return l ? -EAGAIN : -ENOENT;
	if (ff_link_bind_local(fd, &self, &from)) {
		ff_real.close(s);
		return -EADDRINUSE;
	}
	ret = send_offer(s, &from, to, token);
	if (ret) {
		/* The acceptor closed its end: its link is gone, and so is ours. */
		ff_real.close(s);
		pthread_mutex_lock(&mu);
		if ((l = by_id(id)))
			xlink_close(l);
		pthread_mutex_unlock(&mu);
		return ret;
	}
	o->sh = NULL;
	o->bell = s;
	o->id = id;
	o->sent = ff_now_ms();
	return 0;
}

int ff_xlink_settle(struct ff_offer *o, struct ff_handover *h)
{
	uint8_t buf[MSG_CAP];
	struct ff_msg m;
	struct xlink *l;
	int s = o->bell, r;
	uint64_t id = o->id;
	int64_t deadline = o->sent + OFFER_WAIT_MS;

	free(o);
	r = read_msg(s, buf, sizeof(buf), deadline, &m);
	if (r == 1 && m.type == FF_MSG_LINK_TAKE && ff_now_ms() <= deadline &&
	    send_bare(s, FF_MSG_LINK_COMMIT) == 0) {
		h->chan = s;	/* the swap puts its TCP_NODELAY back as the application has it */
		h->shm = NULL;
		return 1;
	}
	ff_debug("cross-host link offer not taken in %d ms: asking the agent", OFFER_WAIT_MS);
	ff_real.close(s);
	/*
	 * Closed on us before the deadline: the acceptor dropped the link
	 * (its listener closed, it forked) or cannot use it, so the rest of
	 * the stock would fail the same way.
	 */
	if (r != 1 && ff_now_ms() < deadline) {
		pthread_mutex_lock(&mu);
		if ((l = by_id(id)))
			xlink_close(l);
		pthread_mutex_unlock(&mu);
	}
	return 0;
}

/* ---- the accepting side ---- */

/* ---- the accepting side's epoll set (mu held throughout) ---- */

/* Whether there is a set whose number the application has not taken back. */
static int ep_live(void)
{
	struct ff_slot *s = ep >= 0 ? ff_fd_slot(ep) : NULL;

	if (!s || !(atomic_load(&s->flags) & FF_FD_CONTROL))
		ep = -1;
	return ep >= 0;
}

static void ep_watch(int fd, int op, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.fd = fd };

	ff_real.epoll_ctl(ep, op, fd, &ev);
}

/* The set, made (with every link's listener and stock not taken in it) if there is none; or -1. */
static int ep_fd(void)
{
	if (ep_live())
		return ep;
	ep = ff_real.epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		return -1;
	ff_fd_mark(ep, FF_FD_CONTROL);
	for (int i = 0; i < XLINK_MAX; i++) {
		struct xlink *l = &xl[i];

		if (!l->used || !l->acceptor)
			continue;
		l->lis_on = l->nheld < HELD_MAX;
		ep_watch(l->listener, EPOLL_CTL_ADD, l->lis_on ? EPOLLIN : 0);
		for (int k = 0; k < l->nheld; k++)
			if (l->held[k].state != HELD_TAKEN)
				ep_watch(l->held[k].fd, EPOLL_CTL_ADD, EPOLLIN);
	}
	return ep;
}

/* Watch l's listener only while l has room for what waits on it (else it would wake us for good). */
static void listener_interest(struct xlink *l)
{
	int on = l->nheld < HELD_MAX;

	if (on != l->lis_on && ep_live())
		ep_watch(l->listener, EPOLL_CTL_MOD, on ? EPOLLIN : 0);
	l->lis_on = on;
}

static void held_add(struct xlink *l, int fd)
{
	l->held[l->nheld++] = (struct held){ .fd = fd, .state = HELD_READY };
	if (ep_live())
		ep_watch(fd, EPOLL_CTL_ADD, EPOLLIN);
}

/* Take what waits on l's listener (mu held); a broken listener closes l. */
static void take_stock(struct xlink *l)
{
	while (l->nheld < HELD_MAX) {
		int s = ff_real.accept4(l->listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (s >= 0) {
			held_add(l, s);
			continue;
		}
		if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
			xlink_close(l);
		break;
	}
	if (l->used)
		listener_interest(l);
}

/*
 * Read what came on held connection h of l (mu held): its offer. 0 to keep
 * it, -1 to close it (EOF, anything but the protocol, a wrong token, an
 * offer l may not carry).
 */
static int read_held(struct xlink *l, struct held *h)
{
	uint8_t buf[MSG_CAP];
	struct ff_msg m;
	const struct ff_attr *c, *a, *t;
	int r;

	if (h->state == HELD_OFFERED)	/* readable now: EOF (withdrawn), or not the protocol */
		return -1;
	r = read_msg(h->fd, buf, sizeof(buf), 0, &m);
	if (r != 1)
		return r;
	c = ff_msg_get(&m, FF_ATTR_LOCAL_EP);
	a = ff_msg_get(&m, FF_ATTR_REMOTE_EP);
	t = ff_msg_get(&m, FF_ATTR_TOKEN);
	if (m.type != FF_MSG_LINK_OFFER || !c || !a || !t || ff_msg_get(&m, FF_ATTR_CHANNEL) ||
	    memcmp(t->val, l->token, FF_TOKEN_LEN))
		return -1;
	h->conn.len = (uint8_t)c->len;
	memcpy(h->conn.b, c->val, c->len);
	h->acc.len = (uint8_t)a->len;
	memcpy(h->acc.b, a->val, a->len);
	/* Only for the container the link was granted for, to our listener. */
	if (!ip_eq(&h->conn, &l->peer) || !port_eq(&h->acc, &l->self))
		return -1;
	h->state = HELD_OFFERED;
	return 0;
}

/* fd, which the set says is ready (mu held): a link's listener, or stock connection. */
static void on_ready(int fd)
{
	for (int i = 0; i < XLINK_MAX; i++) {
		struct xlink *l = &xl[i];

		if (!l->used || !l->acceptor)
			continue;
		if (l->listener == fd) {
			take_stock(l);
			return;
		}
		for (int k = 0; k < l->nheld; k++)
			if (l->held[k].fd == fd) {
				if (read_held(l, &l->held[k])) {
					held_close(&l->held[k]);
					l->held[k] = l->held[--l->nheld];
					listener_interest(l);
				}
				return;
			}
	}
}

/*
 * Take in what the set reports ready (mu held): stock waiting on listeners,
 * offers, ends. Again while it reports something: stock just taken from a
 * listener may carry its offer already. Each round consumes or closes what
 * it reports, so the rounds end; they are bounded all the same.
 */
static void ready(void)
{
	struct epoll_event ev[32];
	int e = ep_fd(), n;

	for (int round = 0; e >= 0 && round < 8; round++) {
		n = ff_real.epoll_wait(e, ev, 32, 0);
		if (n <= 0)
			return;
		for (int i = 0; i < n; i++)
			on_ready(ev[i].data.fd);
	}
}

/*
 * The stock connection offering conn -> acc, out of l's keeping (mu held),
 * or -1; *taken says when LINK_TAKE went, 0 if it has not yet.
 */
static int offered(struct xlink *l, const struct ep *conn, const struct ep *acc, int64_t *taken)
{
	for (int i = 0; i < l->nheld; i++) {
		struct held *h = &l->held[i];

		if ((h->state == HELD_OFFERED || h->state == HELD_TAKEN) && ep_eq(&h->conn, conn) &&
		    ep_eq(&h->acc, acc)) {
			int s = h->fd;

			*taken = h->state == HELD_TAKEN ? h->taken : 0;
			if (!*taken)
				ep_del(s);	/* it goes to the application's fd: not ours to watch */
			*h = l->held[--l->nheld];
			listener_interest(l);
			return s;
		}
	}
	return -1;
}

int ff_xlink_take(const struct ep *acc, const struct ep *conn, struct ff_handover *h)
{
	static const int on = 1;
	uint8_t buf[MSG_CAP];
	struct ff_msg m;
	int64_t now = ff_now_ms(), taken = 0;
	int s = -1;

	pthread_mutex_lock(&mu);
	/* Taken already while accept() waited (the usual case), or read now. */
	for (int pass = 0; pass < 2 && s < 0; pass++) {
		if (pass)
			ready();
		for (int i = 0; i < XLINK_MAX && s < 0; i++) {
			struct xlink *l = &xl[i];

			if (!l->used || !l->acceptor || !port_eq(&l->self, acc) ||
			    !ip_eq(&l->peer, conn))
				continue;
			if (l->expires <= now)
				xlink_close(l);
			else
				s = offered(l, conn, acc, &taken);
		}
	}
	pthread_mutex_unlock(&mu);
	if (s < 0)
		return 0;
	if ((taken || send_bare(s, FF_MSG_LINK_TAKE) == 0) &&
	    read_msg(s, buf, sizeof(buf), (taken ? taken : ff_now_ms()) + COMMIT_WAIT_MS, &m) == 1 &&
	    m.type == FF_MSG_LINK_COMMIT) {
		/*
		 * Nothing answers the commit, so its ACK would wait for the
		 * delayed-ACK timer, and the connector's first small write
		 * (Nagle) for that ACK.
		 */
		ff_real.setsockopt(s, IPPROTO_TCP, TCP_QUICKACK, &on, sizeof(on));
		h->chan = s;
		h->shm = NULL;
		return 1;
	}
	ff_debug("cross-host link offer taken but not committed: asking the agent");
	ff_real.close(s);
	return 0;
}

/* ---- answering early, while accept() would block ---- */

/* Close what waits to be closed (fill_mu held); a number the application took back is left alone. */
static void close_now(void)
{
	for (int i = 0; i < nlater; i++)
		ff_fd_close_control(later[i]);
	nlater = 0;
}

void ff_xlink_close_later(int fd)
{
	pthread_mutex_lock(&fill_mu);
	if (nlater == LATER_MAX)
		close_now();
	/* Marked as the library's, like a session: the application closing the number unmarks it. */
	ff_fd_mark(fd, FF_FD_CONTROL);
	later[nlater++] = fd;
	pthread_mutex_unlock(&fill_mu);
}

/* Whether listener lis has cross-host links (mu held); closes expired ones. */
static int has_links(const struct ep *lis)
{
	int64_t now = ff_now_ms();
	int any_here = 0;

	for (int i = 0; i < XLINK_MAX; i++) {
		struct xlink *l = &xl[i];

		if (!l->used || !l->acceptor || !port_eq(&l->self, lis))
			continue;
		if (l->expires <= now)
			xlink_close(l);
		else
			any_here = 1;
	}
	return any_here;
}

/* Take in what is ready and answer the offers to listener lis (mu held). */
static void answer_early(const struct ep *lis)
{
	int64_t now = ff_now_ms();

	ready();
	for (int i = 0; i < XLINK_MAX; i++) {
		struct xlink *l = &xl[i];

		if (!l->used || !l->acceptor || !port_eq(&l->self, lis))
			continue;
		for (int k = 0; k < l->nheld; k++) {
			struct held *h = &l->held[k];

			if (h->state != HELD_OFFERED)
				continue;
			/* Readable from now on once its commit comes: accept() reads that. */
			ep_del(h->fd);
			if (send_bare(h->fd, FF_MSG_LINK_TAKE)) {
				ff_real.close(h->fd);
				*h = l->held[--l->nheld];
				k--;
				continue;
			}
			h->state = HELD_TAKEN;
			h->taken = now;
		}
		listener_interest(l);
	}
}

int ff_xlink_before_accept(int lfd)
{
	struct pollfd p[2];
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss), tl;
	struct timeval tv = { 0 };
	struct ep lis;
	int fl = ff_real.fcntl(lfd, F_GETFL), n;

	/* Only where accept() would block for good: blocking, no SO_RCVTIMEO. */
	tl = sizeof(tv);
	if (fl < 0 || (fl & O_NONBLOCK) ||
	    ff_real.getsockopt(lfd, SOL_SOCKET, SO_RCVTIMEO, &tv, &tl) || tv.tv_sec || tv.tv_usec ||
	    ff_real.getsockname(lfd, (void *)&ss, &sl) || to_ep(&ss, &lis))
		return 0;
	pthread_mutex_lock(&fill_mu);
	close_now();
	pthread_mutex_unlock(&fill_mu);
	for (;;) {
		pthread_mutex_lock(&mu);
		n = has_links(&lis) ? ep_fd() : -1;
		pthread_mutex_unlock(&mu);
		if (n < 0)
			return 0;
		p[0] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		p[1] = (struct pollfd){ .fd = n, .events = POLLIN };
		if (ff_real.poll(p, 2, -1) < 0) {
			if (errno == EINTR && !ff_signal_restarts())
				return -1;
			if (errno != EINTR)
				return 0;
			continue;
		}
		if (p[0].revents)
			return 0;	/* a connection (or an error) waits: accept() says which */
		pthread_mutex_lock(&mu);
		answer_early(&lis);
		pthread_mutex_unlock(&mu);
	}
}

/* ---- ends ---- */

/* Close the links keep() does not keep (mu held by the caller or here). */
static void close_where(int (*keep)(const struct xlink *, const void *), const void *arg)
{
	for (int i = 0; i < XLINK_MAX; i++)
		if (xl[i].used && !keep(&xl[i], arg))
			xlink_close(&xl[i]);
}

static int keep_none(const struct xlink *l, const void *arg)
{
	(void)l;
	(void)arg;
	return 0;
}

static int keep_other_listeners(const struct xlink *l, const void *lis)
{
	return !l->acceptor || !port_eq(&l->self, lis);
}

static int keep_connectors(const struct xlink *l, const void *arg)
{
	(void)arg;
	return !l->acceptor;
}

void ff_xlinks_drop(void)
{
	if (!ff_xlinks_any())
		return;
	pthread_mutex_lock(&mu);
	close_where(keep_none, NULL);
	pthread_mutex_unlock(&mu);
}

void ff_xlinks_unlisten(const struct ep *lis)
{
	if (!ff_xlinks_any())
		return;
	pthread_mutex_lock(&mu);
	close_where(keep_other_listeners, lis);
	pthread_mutex_unlock(&mu);
}

void ff_xlinks_atfork_prepare(void)
{
	pthread_mutex_lock(&fill_mu);
	pthread_mutex_lock(&mu);
}

void ff_xlinks_after_fork(int child)
{
	/* The fill session is the parent's (ff_control_atfork_child closes it), and so is its fill. */
	if (child) {
		ep = -1;	/* closed with the control sessions (ff_control_atfork_child) */
		nlater = 0;	/* the same */
		ff_reaper_forked(&reaper);
		fill_agent.fd = -1;
		fill_for = 0;
		atomic_store(&fill_out, 0);
	}
	close_where(child ? keep_none : keep_connectors, NULL);
	pthread_mutex_unlock(&mu);
	pthread_mutex_unlock(&fill_mu);
}
