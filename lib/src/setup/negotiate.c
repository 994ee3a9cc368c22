/* SPDX-License-Identifier: MIT */
/*
 * Negotiation: ask the agent whether an established overlay TCP connection
 * moves to a kernel channel, and swap it in.
 *
 * Design note (at length: docs/BROKERING.md, "The library's side:
 * negotiation and the swap").
 * - After the swap a kernel channel (unix, host-tcp) is an ordinary stream
 *   socket at the application's fd: the data path is the kernel's, and the
 *   shim holds only a connection still waiting for its decision (one atomic
 *   load per call). An shm channel puts its bell socket there; its bytes go
 *   through rings checked and mapped before the swap (shm/io.c).
 * - The decision is made once the connection is established and before the
 *   application can move a byte on it: in a blocking connect(), in
 *   accept()/accept4(), and for a non-blocking connect when the settler
 *   sees it complete (settler.c) or the application first observes it,
 *   whichever comes first. A pending fd is also polled for POLLOUT.
 * - The swap: O_NONBLOCK as the TCP socket's, the options the application
 *   set carried (opts.c), dup3() at the same fd number with its FD_CLOEXEC,
 *   epoll registrations replayed.
 * - Any failure leaves the TCP connection untouched: no error reaches the
 *   application; FREEFLOW_DEBUG=1 says why.
 * - A connection between two processes holding a link is decided over it
 *   (link.c, xlink.c) and listed in the ledger (ledger.c), as are the
 *   agent's answers.
 * - Loopback (127.0.0.0/8, ::1) is never asked about (the agent refuses it,
 *   and programs talk to themselves over it a lot): such a connection stays
 *   TCP, and a listener bound to loopback is not announced.
 * - The table lock is not held while the agent is asked; the conn is in
 *   NEGOTIATING meanwhile and other threads wanting it wait for the
 *   decision. The swap itself runs under the lock, after checking that the
 *   fd still refers to this conn (the application may have closed it).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent.h"
#include "core/core.h"
#include "links/links.h"
#include "setup/setup.h"
#include "shm/shm.h"

/*
 * The link a PATH carries, if any (ttl_ms 0: none). shm (PROTOCOL.md,
 * "Links"): fd. host-tcp ("Cross-host links"): the token, and the connector
 * gets the agent's name for it, the acceptor the listener (fd).
 */
struct path_link {
	int fd;
	uint32_t ttl_ms;
	uint64_t name;
	uint8_t token[FF_TOKEN_LEN];
};

/* What the agent answered, as the ledger lists it: its path kind and REASON. */
struct said {
	uint8_t kind;
	char reason[65];
	int unanswered;		/* asked, but no answer came: listed by this library alone */
	int nolib;		/* not asked: the peer has no library; listed and counted by this library */
};

/* What was decided for one connection, filled by choose(). */
struct ff_decision {
	struct ff_handover h;	/* a fast path: its channel, for shm its mapping (chan -1: none) */
	struct path_link link;	/* a link the PATH carried (ttl_ms 0: none) */
	struct said said;	/* what the agent said, for the ledger */
	int answered;		/* the agent answered with a PATH: it lists it until CLOSED */
	uint64_t entry;		/* ledger entry reserved for a connection a link decided; 0: none */
	char why[160];		/* the overlay: why (FREEFLOW_DEBUG) */
};

/* A host-tcp PATH's link, if it carries one whole; the listener is r->fds[1]. */
static void read_xlink(struct ff_reply *r, uint8_t msg, struct path_link *link)
{
	const struct ff_attr *ttl = ff_msg_get(&r->msg, FF_ATTR_LINK_TTL);
	const struct ff_attr *name = ff_msg_get(&r->msg, FF_ATTR_LINK);
	const struct ff_attr *token = ff_msg_get(&r->msg, FF_ATTR_TOKEN);

	if (!ttl || !token)
		return;
	if (msg == FF_MSG_CONNECT && name && ff_attr_u64(name) && r->nfds == 1) {
		*link = (struct path_link){ -1, ff_attr_u32(ttl), ff_attr_u64(name), { 0 } };
	} else if (msg == FF_MSG_ACCEPT && r->nfds == 2 && ff_is_socket(r->fds[1], SOCK_STREAM, 0)) {
		*link = (struct path_link){ r->fds[1], ff_attr_u32(ttl), 0, { 0 } };
		r->fds[1] = -1;
	} else {
		return;
	}
	memcpy(link->token, token->val, FF_TOKEN_LEN);
}

/*
 * Say why a reply means overlay in d->why and return -1, or fill d->h and
 * return 0. shm (docs/SHM.md): [bell socket, memfd] and perhaps a link
 * (LINK_TTL says so), which goes to d->link; the memfd is mapped (msg says
 * our role) and closed here, the mapping keeps the memory.
 */
static int read_path(struct ff_reply *r, uint8_t msg, struct ff_decision *d)
{
	const struct ff_attr *kind = ff_msg_get(&r->msg, FF_ATTR_PATH_KIND);
	const struct ff_attr *reason = ff_msg_get(&r->msg, FF_ATTR_REASON);
	const struct ff_attr *ttl = ff_msg_get(&r->msg, FF_ATTR_LINK_TTL);
	const char *what = "";
	unsigned k, nfds;

	if (r->msg.type == FF_MSG_ERROR) {
		snprintf(d->why, sizeof(d->why), "agent answered ERROR %u",
			 ff_attr_u32(ff_msg_get(&r->msg, FF_ATTR_ERR_CODE)));
		return -1;
	}
	if (!kind) {
		snprintf(d->why, sizeof(d->why), "agent's PATH has no PATH_KIND");
		return -1;
	}
	k = ff_attr_u8(kind);
	if (k == FF_PATH_OVERLAY) {
		snprintf(d->why, sizeof(d->why), "agent chose overlay (%.*s)",
			 reason ? reason->len : 4, reason ? (const char *)reason->val : "none");
		return -1;
	}
	if (k != FF_PATH_UNIX && k != FF_PATH_HOST_TCP && k != FF_PATH_SHM) {
		snprintf(d->why, sizeof(d->why), "path kind %u is not supported", k);
		return -1;
	}
	/* A host-tcp PATH's second fd is its link's listener; one we cannot use is closed. */
	if (k == FF_PATH_HOST_TCP)
		read_xlink(r, msg, &d->link);
	nfds = k == FF_PATH_SHM ? 2 + (ttl != NULL) : 1;
	if (r->nfds != nfds && !(k == FF_PATH_HOST_TCP && r->nfds == 2)) {
		snprintf(d->why, sizeof(d->why), "PATH kind %u carried %u fds, not %u", k, r->nfds,
			 nfds);
		return -1;
	}
	if (!ff_is_socket(r->fds[0], SOCK_STREAM, k == FF_PATH_SHM)) {
		snprintf(d->why, sizeof(d->why), "the handed fd is not a%s stream socket",
			 k == FF_PATH_SHM ? "n AF_UNIX" : "");
		return -1;
	}
	if (nfds == 3 && !ff_is_socket(r->fds[2], SOCK_SEQPACKET, 1)) {
		snprintf(d->why, sizeof(d->why),
			 "the handed link is not an AF_UNIX seqpacket socket");
		return -1;
	}
	d->h.shm = NULL;
	if (k == FF_PATH_SHM &&
	    ff_shm_open(r->fds[1], msg == FF_MSG_CONNECT ? FF_SHM_CONNECTOR : FF_SHM_ACCEPTOR,
			&d->h.shm, &what) < 0) {
		snprintf(d->why, sizeof(d->why), "shared memory refused: %s", what);
		return -1;
	}
	if (k == FF_PATH_SHM)
		ff_real.close(r->fds[1]);
	if (nfds == 3)
		d->link = (struct path_link){ r->fds[2], ff_attr_u32(ttl), 0, { 0 } };
	d->h.chan = r->fds[0];
	r->nfds = 0;
	return 0;
}

/* Put chan at fd keeping O_NONBLOCK and FD_CLOEXEC. Table lock held. */
/*
 * The accepting end resets the overlay connection as it drops it (SO_LINGER
 * 0, set after the options were carried): otherwise the end that happens
 * to close it first keeps it in TIME_WAIT for a minute, and when that is
 * the connecting end, every new connection to the same server searches
 * past those ports (or runs out of them) in connect(). Its peer has asked
 * already (no fast path without both asks), so the reset reaches a socket
 * that nobody reads any more (over a link the connector may see the reset
 * before its connect() returns: link.c and connect() take the offer's word
 * for it). The connecting end must not reset: a parked acceptor's
 * connection still waits in the accept queue, and a reset one would fail
 * its getpeername (over a cross-host link too: the acceptor may take an
 * offer before accept() returns its connection, xlink.c). An shm channel's
 * socket is AF_UNIX (checked already). With spare, the overlay socket is
 * kept open there (-1 if it could not be), for the caller to close later:
 * the reset then leaves off the path between accept() and the
 * application's first byte (see ff_xlink_close_later).
 */
static int swap_in(int fd, int chan, struct ff_conn *c, int accepting, int is_shm, int *spare)
{
	static const struct linger rst = { .l_onoff = 1, .l_linger = 0 };
	struct linger app = { 0 };
	socklen_t al = sizeof(app);
	int fl = ff_real.fcntl(fd, F_GETFL);
	int fdfl = ff_real.fcntl(fd, F_GETFD);
	int cfl = ff_real.fcntl(chan, F_GETFL);
	int dom = 0;
	socklen_t dl = sizeof(dom);

	if (fl < 0 || fdfl < 0 || cfl < 0)
		return -errno;
	if ((cfl & O_NONBLOCK) != (fl & O_NONBLOCK) &&
	    ff_real.fcntl(chan, F_SETFL, (cfl & ~O_NONBLOCK) | (fl & O_NONBLOCK)) < 0)
		return -errno;
	if (is_shm)
		dom = AF_UNIX;
	else if (ff_real.getsockopt(chan, SOL_SOCKET, SO_DOMAIN, &dom, &dl) < 0)
		return -errno;
	c->kern_family = dom;
	ff_sockopt_carry(fd, chan, c);
	accepting = accepting && !ff_real.getsockopt(fd, SOL_SOCKET, SO_LINGER, &app, &al) &&
		    !ff_real.setsockopt(fd, SOL_SOCKET, SO_LINGER, &rst, sizeof(rst));
	if (spare)
		*spare = ff_real.fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (ff_real.dup3(chan, fd, fdfl & FD_CLOEXEC ? O_CLOEXEC : 0) < 0) {
		int err = errno;

		if (accepting)	/* the application keeps its socket, and its close */
			ff_real.setsockopt(fd, SOL_SOCKET, SO_LINGER, &app, al);
		if (spare && *spare >= 0)
			ff_real.close(*spare);
		if (spare)
			*spare = -1;
		c->kern_family = c->family;
		return -err;
	}
	return 0;
}

/* Record the outcome; table lock held. h NULL: overlay. spare: as for swap_in. */
static void decide(int fd, struct ff_conn *c, struct ff_handover *h, int accepting, int *spare)
{
	struct ff_slot *s = ff_fd_slot(fd);
	struct ff_epreg *regs;
	int ret = -EBADF;

	if (s && s->conn == c && h)
		ret = swap_in(fd, h->chan, c, accepting, h->shm != NULL, spare);
	if (h && ret)
		ff_fallback(fd, "swap failed: %s", strerror(-ret));
	if (h && h->shm && !ret) {
		int fl = ff_real.fcntl(fd, F_GETFL);

		ff_shm_attach(c, h->shm, fl >= 0 && (fl & O_NONBLOCK));
		h->shm = NULL;
	}
	regs = c->epregs;
	ff_conn_set_state(c, ret ? FF_ST_OVERLAY : FF_ST_SWAPPED);
	if (s && s->conn == c)
		ff_epoll_replay(fd, regs, !ret);
	ff_conn_forget_epregs(c);
}

/* Note in *said what PATH r says. */
static void note_said(const struct ff_reply *r, struct said *said)
{
	const struct ff_attr *kind = ff_msg_get(&r->msg, FF_ATTR_PATH_KIND);
	const struct ff_attr *reason = ff_msg_get(&r->msg, FF_ATTR_REASON);
	size_t n = reason ? reason->len : 0;

	said->kind = kind ? ff_attr_u8(kind) : FF_PATH_OVERLAY;
	if (n >= sizeof(said->reason))
		n = sizeof(said->reason) - 1;
	memcpy(said->reason, n ? (const char *)reason->val : "", n);
	said->reason[n] = 0;
}

/*
 * Ask the agent about an established connection: 0 with d->h filled, or -1
 * (d->why says). d->answered: the agent answered with a PATH, noted in d->said.
 */
static int ask_agent(uint8_t msg, const struct ff_ends *e, struct ff_decision *d)
{
	struct ff_reply r;
	int ret = ff_ask(msg, &e->local, &e->remote, &r), fast = -1;

	if (ret < 0) {
		snprintf(d->why, sizeof(d->why), ret == -FF_ELIMIT ? "%s" : "agent unreachable: %s",
			 ff_agent_strerror(ret));
		snprintf(d->said.reason, sizeof(d->said.reason), "%s",
			 ret == -FF_ELIMIT ? "agent-limit" : "agent-unreachable");
		d->said.unanswered = 1;
		return -1;
	}
	fast = read_path(&r, msg, d);
	/* A PATH, whatever it says, is listed by the agent until CLOSED. */
	d->answered = r.msg.type == FF_MSG_PATH;
	if (d->answered)
		note_said(&r, &d->said);
	ff_reply_close_fds(&r);
	return fast;
}

/*
 * The decision for an established connection between e's ends: the
 * overlay for loopback and for a peer without the library, else over a
 * link if one decides it (then d->entry is its reserved ledger entry),
 * else by the agent. 0 with d->h filled for a fast path, -1 for the
 * overlay (d->why says why).
 */
static int choose(struct ff_conn *c, uint8_t msg, const struct ff_ends *e, struct ff_decision *d)
{
	int linked = 0;

	if (ff_skip_loopback(&e->local)) {
		snprintf(d->why, sizeof(d->why), "loopback connection: not negotiated");
		return -1;
	}
	if (msg == FF_MSG_ACCEPT && c->peer_nolib) {
		snprintf(d->why, sizeof(d->why),
			 "the peer has no library: its SYN carries no FreeFlow mark");
		snprintf(d->said.reason, sizeof(d->said.reason), "peer-no-library");
		d->said.nolib = 1;
		return -1;
	}
	/* A linked connection is always listed: no free entry, no link. */
	if ((msg == FF_MSG_CONNECT && c->offer) || msg == FF_MSG_ACCEPT)
		d->entry = ff_ledger_reserve();
	if (msg == FF_MSG_CONNECT && c->offer) {
		if (d->entry)
			linked = ff_offer_settle(c, &d->h);
		else
			ff_offer_free(c->offer);
		c->offer = NULL;
	} else if (msg == FF_MSG_ACCEPT && d->entry) {
		linked = ff_link_take(&e->local, &e->remote, &d->h);
	}
	if (linked)
		return 0;
	ff_ledger_release(d->entry);
	d->entry = 0;
	return ask_agent(msg, e, d);
}

/*
 * List the connection the agent answered (d->said) in entry: what it is
 * now, swapped onto the agent's path or on the overlay; swap-failed: the
 * agent answered a fast path this end could not take (FREEFLOW_DEBUG says why).
 */
static void list_answer(uint64_t entry, int fd, const struct ff_ends *e,
			const struct ff_decision *d, int swapped, uint32_t ring)
{
	const struct said *said = &d->said;

	ff_ledger_publish(entry, &(struct ff_ledger_row){
		.fd = fd, .ends = e,
		.path = !swapped ? FF_PATH_OVERLAY : ring ? FF_PATH_SHM : said->kind,
		.bytes = ring ? FF_SHM_RESIDENT(ring) : 0,
		.reason = swapped || said->kind == FF_PATH_OVERLAY ? said->reason : "swap-failed",
		.alone = said->nolib });
}

/*
 * The two ends of c at fd, from the kernel; a connector over a link has
 * its peer from the offer, and an accepted connection from a peer without
 * the library has them from its SYN. -errno if fd is not connected.
 */
static int ends_of(int fd, struct ff_conn *c, uint8_t msg, struct ff_ends *e)
{
	int offered = msg == FF_MSG_CONNECT && c->offer;

	e->local_len = sizeof(e->local);
	e->remote_len = sizeof(e->remote);
	if (offered)
		ff_offer_peer(c->offer, &e->remote, &e->remote_len);
	/* NEGOTIATING: c is this thread's alone (its SYN's names, read by accepted()). */
	if (msg == FF_MSG_ACCEPT && c->peer_nolib && c->ends.local.ss_family != AF_UNSPEC) {
		e->local = c->ends.local, e->remote = c->ends.remote;
		e->local_len = e->remote_len = e->local.ss_family == AF_INET
						       ? sizeof(struct sockaddr_in)
						       : sizeof(struct sockaddr_in6);
		return 0;
	}
	if (ff_real.getsockname(fd, (void *)&e->local, &e->local_len) ||
	    (!offered && ff_real.getpeername(fd, (void *)&e->remote, &e->remote_len)))
		return -errno;
	return 0;
}

/*
 * Keep the link the PATH carried for the connections that follow (1), or
 * close it (0). A link is used only once the agent has the ledger its
 * connections go in.
 */
static int keep_link(uint8_t msg, const struct ff_ends *e, const struct path_link *link,
		     int swapped, uint32_t ring)
{
	if (!swapped || !link->ttl_ms || (ring && atomic_load(&ff_shm_avoided)) ||
	    ff_ledger_ready() != 0) {
		if (link->fd >= 0)
			ff_real.close(link->fd);
		return 0;
	}
	if (ring)
		ff_link_add(link->fd, msg == FF_MSG_ACCEPT, &e->local, &e->remote, link->ttl_ms,
			    ring);
	else
		ff_xlink_add(&e->local, &e->remote, link->ttl_ms, link->name, link->fd,
			     link->token);
	return 1;
}

void ff_negotiate(int fd, struct ff_conn *c, uint8_t msg)
{
	struct ff_ends e;
	struct ff_decision d = { .h.chan = -1, .link.fd = -1, .said.kind = FF_PATH_OVERLAY };
	struct ff_handover *fast = NULL;
	int ret = ends_of(fd, c, msg, &e), swapped, spare = -1, linked, pair, kept;
	uint32_t ring = 0;
	uint64_t listed = 0;

	if (ret < 0) {
		snprintf(d.why, sizeof(d.why), "not connected: %s", strerror(-ret));
	} else if (choose(c, msg, &e, &d) == 0) {
		fast = &d.h;
		ring = d.h.shm ? (uint32_t)d.h.shm->size : 0;
	}
	/*
	 * What the agent answered goes into the ledger too: a restarted agent
	 * reads it there. So does what it did not answer (it was away or
	 * refused us), if the agent already has the ledger: sending it now
	 * would wait for the agent again.
	 */
	if (((d.answered || d.said.nolib) && ff_ledger_ready() == 0) ||
	    (d.said.unanswered && ff_ledger_held()))
		listed = ff_ledger_reserve();
	ff_table_lock();
	c->answered = d.answered;
	c->ends = e;
	/* An accepting end of a cross-host link's connection resets its overlay socket later. */
	decide(fd, c, fast, msg == FF_MSG_ACCEPT,
	       msg == FF_MSG_ACCEPT && d.entry && fast && !d.h.shm ? &spare : NULL);
	swapped = c->state == FF_ST_SWAPPED;
	if (swapped)
		c->syn_marked = 0;	/* that socket is gone */
	else if (ff_fd_slot(fd)->conn == c)
		ff_syn_unmark(fd, c);
	pair = c->kern_family == AF_UNIX;
	linked = d.entry != 0;	/* choose() keeps an entry only for a connection a link decided */
	if (d.entry && swapped) {
		ff_ledger_publish(d.entry, &(struct ff_ledger_row){
			.fd = fd, .ends = &e, .path = ring ? FF_PATH_SHM : FF_PATH_HOST_TCP,
			.bytes = ring ? FF_SHM_RESIDENT(ring) : 0, .alone = 1 });
		c->ledger = d.entry;
		d.entry = 0;
	} else if (listed) {
		list_answer(listed, fd, &e, &d, swapped, ring);
		c->ledger = listed;
		listed = 0;
	}
	if (d.h.shm)
		ff_shm_put(d.h.shm);	/* the swap failed: not attached */
	if (ff_conn_unref(c))
		ff_conn_free(c);
	ff_table_unlock();
	ff_ledger_release(d.entry);
	ff_ledger_release(listed);
	kept = keep_link(msg, &e, &d.link, swapped, ring);
	/* Connects to the acceptor may wait for this answer (contact.c). */
	if (msg == FF_MSG_CONNECT && !linked && ret == 0)
		ff_contact_done(&e.remote, kept);
	if (spare >= 0)
		ff_xlink_close_later(spare);
	if (fast)
		ff_real.close(d.h.chan);
	else
		ff_fallback(fd, "%s", d.why);
	if (swapped)
		ff_debug("fd %d swapped to %s, decided %s", fd,
			 ring ? "shm" : pair ? "a socket pair" : "host tcp",
			 linked ? "over a link" : "by the agent");
	/* A process the shim cannot follow on shm (routes.c) keeps no shm connection. */
	if (swapped && ring && atomic_load(&ff_shm_avoided))
		ff_shm_switch(fd);
}

static int tcp_state(int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	if (ff_real.getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0)
		return -1;
	return ti.tcpi_state;
}

static int is_nonblocking(int fd)
{
	int fl = ff_real.fcntl(fd, F_GETFL);

	return fl >= 0 && (fl & O_NONBLOCK);
}

/*
 * A pending connection in one of three TCP states: still connecting (wait,
 * or EAGAIN as the kernel would say), failed (the shim steps aside and the
 * real call reports the error), or established (negotiate now).
 */
int ff_settle_slow(int fd, int nonblock)
{
	struct ff_slot *s = ff_fd_slot(fd);
	struct ff_conn *c;
	int st;

	ff_table_lock();
	for (;;) {
		c = s->conn;
		if (!c || (c->state != FF_ST_PENDING && c->state != FF_ST_NEGOTIATING))
			break;
		if (c->state == FF_ST_NEGOTIATING) {
			ff_table_wait();
			continue;
		}
		st = tcp_state(fd);
		if (st == TCP_SYN_SENT) {
			struct pollfd p = { .fd = fd, .events = POLLOUT };

			ff_table_unlock();
			if (nonblock || is_nonblocking(fd))
				return -EAGAIN;
			ff_real.poll(&p, 1, -1);
			ff_table_lock();
			continue;
		}
		if (st != TCP_ESTABLISHED && st != TCP_CLOSE_WAIT &&
		    !(c->offer && ff_offer_taken(c->offer))) {
			ff_syn_unmark(fd, c);
			ff_conn_set_state(c, FF_ST_OVERLAY);
			ff_epoll_replay(fd, c->epregs, 0);
			ff_conn_forget_epregs(c);
			break;
		}
		ff_conn_set_state(c, FF_ST_NEGOTIATING);
		c->refs++;
		ff_table_unlock();
		ff_negotiate(fd, c, FF_MSG_CONNECT);
		return 0;
	}
	ff_table_unlock();
	return 0;
}
