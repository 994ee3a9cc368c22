/* SPDX-License-Identifier: MIT */
/*
 * Links: same-host connections set up without the agent (docs/PROTOCOL.md,
 * "Links"; at length: docs/BROKERING.md, "Links in the library").
 *
 * Design note.
 * - With a PATH shm the agent may hand a link, an AF_UNIX SOCK_SEQPACKET
 *   pair between the two processes, kept for LINK_TTL under the acceptor
 *   endpoint (connector) or the listener's port and the connector's address
 *   (acceptor).
 * - Connecting to that endpoint again, the connector binds its socket, makes
 *   the shm channel itself and sends the acceptor's half in a LINK_OFFER
 *   before its SYN leaves, so accept() finds it already queued.
 * - The offer word in the memfd header decides by compare-and-swap, so
 *   exactly one outcome wins: TAKEN (both on shm) or WITHDRAWN (after
 *   OFFER_WAIT_MS, a failed connect, or EOF on the bell: both ask the
 *   agent). Waiting, the connector reads only doorbells from the bell
 *   (take_bells): a switch message behind them belongs to the adoption.
 *   MISSES_MAX withdrawn in a row end the link (count_answer).
 * - Trust: an offer is taken only for a connection from the peer address the
 *   link was granted for; the channel is checked as an agent-made one is.
 * - Each link keeps up to CHANS_MAX channels mapped for reuse (PROTOCOL.md,
 *   "Reusing channels").
 * - fork: the child closes every link it inherited; the parent closes its
 *   acceptor links (its listeners are now shared).
 * - Links end at LINK_TTL (the acceptor's GRACE_MS later), pending offers
 *   PENDING_KEEP_MS after they came, even in a process that never calls
 *   the library again: a thread, the reaper, closes them, so an idle
 *   process holds no socket or channel of another container's for long
 *   (a migration's checkpoint waits for that: ARCHITECTURE.md).
 *
 * Locking: mu guards the tables; it is taken before the table lock when
 * both are needed (fork), never while holding it.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "core/core.h"
#include "freeflow/proto.h"
#include "links/links.h"
#include "shm/shm.h"

#define LINK_MAX	256	/* links of one process, both roles */
#define PENDING_MAX	64	/* offers drained but not yet accepted */
#define PENDING_KEEP_MS	1000	/* longer than any connector waits for its answer */
#define OFFER_WAIT_MS	5	/* the connector's wait; the agent's peer wait adds 45 */
#define CHANS_MAX	32	/* channels a link keeps mapped for reuse */
#define GRACE_MS	1000	/* the acceptor keeps a link this much past LINK_TTL */

/*
 * A channel a link keeps mapped between connections (map NULL: free). On
 * the connector's side, memfd stays open until an offer carried it to the
 * acceptor (-1 after); the acceptor keeps the map under the same id.
 */
struct chan {
	struct ff_shm_map *map;
	uint32_t id;
	int memfd;
};

struct link {
	int fd;			/* -1: free slot */
	int acceptor;		/* we accept over it (else we offer over it) */
	uint64_t id;		/* tells a reused slot apart */
	struct ep self;		/* connector: our address (port unused); acceptor: our listener */
	struct ep peer;		/* connector: the acceptor endpoint; acceptor: the connector (port unused) */
	uint32_t ring;		/* connector: ring size of the channels it makes */
	int64_t expires;	/* connector: ms, CLOCK_MONOTONIC */
	uint32_t next_chan;	/* connector: the number of its next channel (0: none yet) */
	struct chan chans[CHANS_MAX];
	int misses;		/* connector: offers withdrawn since the last one taken */
};

struct pending {
	int bell, memfd;	/* -1 bell: free slot; -1 memfd: a channel the link keeps */
	uint32_t chan;		/* the connector's number of the channel; 0: kept by nobody */
	int slot;		/* the link it came over, while its id is unchanged */
	uint64_t id;
	struct ep conn, acc;
	int64_t at;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct link links[LINK_MAX];
static struct pending pend[PENDING_MAX];
static int nlinks;		/* slots in use at or below this index */
static uint64_t next_id = 1;
/* Whether any link exists: connect() and accept() pay one load while none does. */
static _Atomic int any_link;
static int64_t expire(void);
static void *reap(void *arg);
static struct ff_reaper reaper = { .mu = &mu, .expire = expire, .thread = reap };

/* later: unmapped in the background, as a closing link's channels are (shm/spill.c). */
static void chan_drop(struct chan *ch, int later)
{
	if (later)
		ff_shm_map_put_later(ch->map);
	else
		ff_shm_map_put(ch->map);
	if (ch->memfd >= 0)
		ff_real.close(ch->memfd);
	*ch = (struct chan){ .memfd = -1 };
}

/* mu held. */
static void link_close(struct link *l)
{
	ff_real.close(l->fd);
	l->fd = -1;
	for (int i = 0; i < CHANS_MAX; i++)
		chan_drop(&l->chans[i], 1);
}

static void pending_close(struct pending *p)
{
	ff_real.close(p->bell);
	if (p->memfd >= 0)
		ff_real.close(p->memfd);
	p->bell = p->memfd = -1;
}

/* When l ends: the acceptor keeps it GRACE_MS past the connector. */
static int64_t link_end(const struct link *l)
{
	return l->expires + (l->acceptor ? GRACE_MS : 0);
}

/* Close the links and pending offers that ended (mu held); the next end, 0 if none is left. */
static int64_t expire(void)
{
	int64_t now = ff_now_ms(), next = 0;

	for (int i = 0; i < nlinks; i++) {
		int64_t end = link_end(&links[i]);

		if (links[i].fd < 0)
			continue;
		if (end <= now)
			link_close(&links[i]);
		else if (!next || end < next)
			next = end;
	}
	for (int i = 0; i < PENDING_MAX; i++) {
		int64_t end = pend[i].at + PENDING_KEEP_MS;

		if (pend[i].bell < 0)
			continue;
		if (end <= now)
			pending_close(&pend[i]);
		else if (!next || end < next)
			next = end;
	}
	return next;
}

static void *reap(void *arg)
{
	(void)arg;
	return ff_reaper_run(&reaper);
}

static void tables_init(void)
{
	for (int i = 0; i < LINK_MAX; i++) {
		links[i].fd = -1;
		for (int k = 0; k < CHANS_MAX; k++)
			links[i].chans[k].memfd = -1;
	}
	for (int i = 0; i < PENDING_MAX; i++)
		pend[i].bell = pend[i].memfd = -1;
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* A free slot (mu held), making room by dropping expired links, or NULL. */
static struct link *free_slot(void)
{
	int64_t now = ff_now_ms();

	for (int i = 0; i < LINK_MAX; i++)
		if (links[i].fd >= 0 && !links[i].acceptor && links[i].expires <= now)
			link_close(&links[i]);
	for (int i = 0; i < LINK_MAX; i++)
		if (links[i].fd < 0) {
			if (i >= nlinks)
				nlinks = i + 1;
			return &links[i];
		}
	return NULL;
}

void ff_link_add(int fd, int acceptor, const struct sockaddr_storage *local,
		 const struct sockaddr_storage *remote, uint32_t ttl_ms, uint32_t ring)
{
	struct link k = { .fd = fd, .acceptor = acceptor, .ring = ring };
	struct link *l = NULL;

	for (int i = 0; i < CHANS_MAX; i++)
		k.chans[i].memfd = -1;

	pthread_once(&init_once, tables_init);
	if (to_ep(local, &k.self) || to_ep(remote, &k.peer)) {
		ff_real.close(fd);
		return;
	}
	k.expires = ff_now_ms() + ttl_ms;
	pthread_mutex_lock(&mu);
	/* A newer connector link to the same endpoint replaces the older. */
	for (int i = 0; i < nlinks && !acceptor; i++)
		if (links[i].fd >= 0 && !links[i].acceptor && ep_eq(&links[i].peer, &k.peer))
			link_close(&links[i]);
	l = free_slot();
	if (l) {
		k.id = next_id++;
		*l = k;
		atomic_store(&any_link, 1);
		ff_reaper_kick(&reaper, link_end(l));
	} else {
		ff_real.close(fd);
	}
	pthread_mutex_unlock(&mu);
}

/*
 * Links are used only while the agent is there (one poll() per use): with
 * it gone, new connections take the overlay as they would without links,
 * and a restarted agent, which knows neither link nor ledger, gets the
 * ledger again on the new session and hands new links.
 */
static int agent_there(void)
{
	if (ff_control_alive())
		return 1;
	ff_links_drop_all();
	ff_xlinks_drop();
	return 0;
}

/* ---- the connecting side ---- */

/* The usable connector link to dst (mu held), or NULL; drops an expired one. */
static struct link *connector_link(const struct ep *dst)
{
	int64_t now = ff_now_ms();

	for (int i = 0; i < nlinks; i++) {
		struct link *l = &links[i];

		if (l->fd < 0 || l->acceptor || !ep_eq(&l->peer, dst))
			continue;
		if (l->expires > now)
			return l;
		link_close(l);
	}
	return NULL;
}

int ff_link_bind_local(int fd, const struct ep *self, struct ep *local)
{
	struct sockaddr_storage ss = { .ss_family = AF_INET };
	struct sockaddr_in *in = (void *)&ss;
	struct sockaddr_in6 *in6 = (void *)&ss;
	socklen_t len = sizeof(*in);
	int any = 1;

	/* The connection's address is the container's, the link's; the port any. */
	if (self->len == FF_EP4_LEN) {
		memcpy(&in->sin_addr, self->b, 4);
	} else {
		ss.ss_family = AF_INET6;
		memcpy(&in6->sin6_addr, self->b, 16);
		len = sizeof(*in6);
	}
	/* A v6 socket takes the v4 address mapped; a socket the application bound says EINVAL. */
	if (bind(fd, (void *)&ss, len) && errno == EAFNOSUPPORT && self->len == FF_EP4_LEN) {
		memset(&ss, 0, sizeof(ss));
		ss.ss_family = AF_INET6;
		in6->sin6_addr.s6_addr[10] = in6->sin6_addr.s6_addr[11] = 0xff;
		memcpy(&in6->sin6_addr.s6_addr[12], self->b, 4);
		bind(fd, (void *)&ss, sizeof(*in6));
	}
	len = sizeof(ss);
	if (ff_real.getsockname(fd, (void *)&ss, &len) || to_ep(&ss, local) ||
	    (!local->b[local->len - 2] && !local->b[local->len - 1]))
		return -1;
	if (ip_eq(local, self))
		return 0;
	for (int i = 0; i < local->len - 2; i++)
		any &= !local->b[i];
	if (!any)	/* the application bound another address: no offer */
		return -1;
	memcpy(local->b, self->b, self->len - 2u);	/* bound to any: the container's */
	return 0;
}

/*
 * Send the LINK_OFFER for conn -> acc on channel chan with the acceptor's
 * bell end and, unless it is -1, the memfd (mu held): 0 or -errno.
 */
static int send_offer(int link, const struct ep *conn, const struct ep *acc, uint32_t chan,
		      int bell, int memfd)
{
	uint8_t buf[FF_HDR_LEN + 3 * FF_ATTR_HDR_LEN + 2 * FF_EP6_LEN + 4];
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(2 * sizeof(int))];
	} ctl = { 0 };
	int fds[2] = { bell, memfd }, nfds = memfd >= 0 ? 2 : 1;
	struct ff_enc e;
	struct iovec iov;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
			     .msg_controllen = CMSG_SPACE(nfds * sizeof(int)) };
	int n;

	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_LINK_OFFER, 0);
	ff_enc_attr(&e, FF_ATTR_LOCAL_EP, conn->b, conn->len);
	ff_enc_attr(&e, FF_ATTR_REMOTE_EP, acc->b, acc->len);
	ff_enc_u32(&e, FF_ATTR_CHANNEL, chan);
	n = ff_enc_finish(&e);
	if (n < 0)
		return n;
	iov = (struct iovec){ buf, (size_t)n };
	ctl.h.cmsg_level = SOL_SOCKET;
	ctl.h.cmsg_type = SCM_RIGHTS;
	ctl.h.cmsg_len = CMSG_LEN(nfds * sizeof(int));
	memcpy(CMSG_DATA(&ctl.h), fds, nfds * sizeof(int));
	return ff_real.sendmsg(link, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) == n ? 0 : -errno;
}

/* A channel of l both ends let go of, laid out afresh for the next offer (mu held), or NULL. */
static struct chan *reuse(struct link *l)
{
	for (int i = 0; i < CHANS_MAX; i++)
		if (l->chans[i].map && ff_shm_map_idle(l->chans[i].map) &&
		    !ff_shm_map_reset(l->chans[i].map))
			return &l->chans[i];
	return NULL;
}

/*
 * The channel for an offer over link l (mu held): a kept one, else a new
 * one, kept if there is room (its number then nonzero). 0 with *sh (the
 * connector's end), *chan and *memfd (-1 when the acceptor has it), or -errno.
 */
static int channel_for(struct link *l, struct ff_shm **sh, uint32_t *chan, int *memfd)
{
	struct chan *ch = reuse(l);
	int ret;

	if (ch) {
		*chan = ch->id;
		*memfd = ch->memfd;
		ret = ff_shm_adopt(ch->map, FF_SHM_CONNECTOR, sh);
		if (ret)
			chan_drop(ch, 0);
		return ret;
	}
	ret = ff_shm_create(l->ring, memfd, sh);
	*chan = 0;
	for (int i = 0; !ret && i < CHANS_MAX; i++)
		if (!l->chans[i].map) {
			l->chans[i] = (struct chan){ ff_shm_map_get(*sh), ++l->next_chan, *memfd };
			*chan = l->next_chan;
			break;
		}
	return ret;
}

/* Offer fd's connection over l (mu held), with a new bell in o: 0 or -errno. */
static int offer_over(struct link *l, int fd, const struct ep *to, struct ff_offer *o)
{
	struct ep from;
	uint32_t chan = 0;
	int bell[2], memfd = -1, ret;

	if (ff_link_bind_local(fd, &l->self, &from))
		return -EADDRINUSE;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, bell))
		return -errno;
	o->bell = bell[0];
	ret = channel_for(l, &o->sh, &chan, &memfd);
	o->slot = (int)(l - links);
	o->id = l->id;
	o->chan = chan;
	if (!ret) {
		ret = send_offer(l->fd, &from, to, chan, bell[1], memfd);
		/* Full (the acceptor is behind): this one asks the agent. Else the link is dead. */
		if (ret && ret != -EAGAIN)
			link_close(l);
	}
	/* Sent, the acceptor has the memfd; unsent, only a kept channel needs it still. */
	for (int i = 0; !ret && i < CHANS_MAX; i++)
		if (chan && l->chans[i].map && l->chans[i].id == chan)
			l->chans[i].memfd = -1;
	if (memfd >= 0 && (!ret || !chan))
		ff_real.close(memfd);
	ff_real.close(bell[1]);
	return ret;
}

struct ff_offer *ff_link_offer(int fd, const struct sockaddr *sa, socklen_t salen, int *none)
{
	struct sockaddr_storage dst = { 0 };
	struct ep to;
	struct ff_offer *o;
	struct link *l;
	int ret = -ENOENT;

	*none = 0;
	if (salen > sizeof(dst))
		return NULL;
	/* None at all (no poll of the agent's session needed), or the agent is gone with them. */
	if (!atomic_load_explicit(&any_link, memory_order_relaxed) && !ff_xlinks_any()) {
		*none = 1;
		return NULL;
	}
	if (!agent_there())
		return NULL;
	memcpy(&dst, sa, salen);
	if (to_ep(&dst, &to) || !(o = calloc(1, sizeof(*o))))
		return NULL;
	o->bell = -1;
	o->dst = dst;
	o->dstlen = salen;
	pthread_mutex_lock(&mu);
	l = atomic_load_explicit(&any_link, memory_order_relaxed) ? connector_link(&to) : NULL;
	if (l)
		ret = offer_over(l, fd, &to, o);
	pthread_mutex_unlock(&mu);
	if (!l)
		ret = ff_xlink_offer(fd, &to, o);
	*none = ret == -ENOENT;
	if (!ret)
		return o;
	if (ret != -ENOENT)
		ff_debug("link offer not sent: %s", strerror(-ret));
	if (o->sh) {
		ff_offer_free(o);
	} else {
		if (o->bell >= 0)
			ff_real.close(o->bell);
		free(o);
	}
	return NULL;
}

void ff_offer_forget(struct ff_offer *o)
{
	struct link *l = &links[o->slot];

	if (!o->sh) {	/* cross host: the acceptor reads EOF instead of a commit */
		ff_real.close(o->bell);
		free(o);
		return;
	}
	/* Not taken: its channel is not kept either (the acceptor never uses it). */
	pthread_mutex_lock(&mu);
	for (int i = 0; o->chan && l->fd >= 0 && l->id == o->id && i < CHANS_MAX; i++)
		if (l->chans[i].map && l->chans[i].id == o->chan)
			chan_drop(&l->chans[i], 0);
	pthread_mutex_unlock(&mu);
	ff_real.close(o->bell);
	ff_shm_put(o->sh);
	free(o);
}

void ff_offer_free(struct ff_offer *o)
{
	uint32_t want = FF_OFFER_OFFERED;

	if (!o)
		return;
	if (o->sh)
		atomic_compare_exchange_strong(ff_shm_word(o->sh, FF_SHM_OFF_OFFER), &want,
					       FF_OFFER_WITHDRAWN);
	ff_offer_forget(o);
}

void ff_offer_peer(const struct ff_offer *o, struct sockaddr_storage *sa, socklen_t *len)
{
	*sa = o->dst;
	*len = o->dstlen;
}

int ff_offer_taken(struct ff_offer *o)
{
	uint32_t v = FF_OFFER_OFFERED;

	/* Cross host, only the connector's commit decides, and it has not been sent. */
	if (!o->sh)
		return 0;
	atomic_compare_exchange_strong(ff_shm_word(o->sh, FF_SHM_OFF_OFFER), &v,
				       FF_OFFER_WITHDRAWN);
	return v == FF_OFFER_TAKEN;
}

static int offer_decided(void *arg)
{
	return atomic_load_explicit((_Atomic uint32_t *)arg, memory_order_acquire) !=
	       FF_OFFER_OFFERED;
}

/*
 * Read the doorbells at the head of bell, and nothing past them: a switch
 * message (S with the new socket, docs/SHM.md "Moving down") must stay
 * there for the connection's adoption; read with them, its fd would be
 * closed unseen. 1 if only doorbells were there, 0 at EOF or when
 * something else is next.
 */
static int take_bells(int bell)
{
	char b[64];
	ssize_t n = ff_real.recv(bell, b, sizeof(b), MSG_DONTWAIT | MSG_PEEK), k;

	if (n < 0)
		return errno == EAGAIN || errno == EINTR;
	for (k = 0; k < n && b[k] == FF_SHM_BELL; k++)
		;
	if (k)
		ff_real.recv(bell, b, (size_t)k, MSG_DONTWAIT);
	return n > 0 && k == n;
}

/*
 * Wait for the acceptor's answer: spin, then sleep on the bell with the
 * wake-up announced in offer_wait (the same Dekker pattern as the rings,
 * docs/SHM.md). Returns the word's final value, after withdrawing the
 * offer ourselves at the deadline or when the bell ends.
 */
static uint32_t await_answer(struct ff_offer *o)
{
	_Atomic uint32_t *word = ff_shm_word(o->sh, FF_SHM_OFF_OFFER);
	_Atomic uint32_t *wait = ff_shm_word(o->sh, FF_SHM_OFF_OFFER_WAIT);
	int64_t deadline = ff_now_ms() + OFFER_WAIT_MS, left;
	uint32_t v = FF_OFFER_OFFERED;

	ff_shm_spin_until(offer_decided, word);
	while ((left = deadline - ff_now_ms()) > 0) {
		struct pollfd p = { .fd = o->bell, .events = POLLIN };

		atomic_store_explicit(wait, 1, memory_order_relaxed);
		atomic_thread_fence(memory_order_seq_cst);
		if (offer_decided(word))
			break;
		/*
		 * EOF: the acceptor dropped the offer unread (its link closed
		 * with the offer queued) or could not use it: ask the agent.
		 * Anything but doorbells: the acceptor took the offer and
		 * already moved the connection down.
		 */
		if (ff_real.poll(&p, 1, (int)left) > 0 && !take_bells(o->bell))
			break;
	}
	atomic_compare_exchange_strong(word, &v, FF_OFFER_WITHDRAWN);
	return atomic_load(word);
}

/*
 * Offers withdrawn in a row (not taken in time, or unusable to the
 * acceptor) after which the connector ends the link: another process holding
 * the listener takes the connections (forked workers that all accept), so
 * each offer would cost its connection OFFER_WAIT_MS. Not at the first: a
 * slow acceptor's link, and the channels it keeps, stay.
 */
#define MISSES_MAX	2

/*
 * o's answer came (taken: 1): MISSES_MAX withdrawn in a row end its link;
 * the next connections ask the agent, which grants a new link if its rules
 * still hold (PROTOCOL.md, "Links").
 */
static void count_answer(const struct ff_offer *o, int taken)
{
	struct link *l = &links[o->slot];

	pthread_mutex_lock(&mu);
	if (l->fd >= 0 && l->id == o->id && !l->acceptor) {
		l->misses = taken ? 0 : l->misses + 1;
		if (l->misses >= MISSES_MAX)
			link_close(l);
	}
	pthread_mutex_unlock(&mu);
}

int ff_offer_settle(struct ff_conn *c, struct ff_handover *h)
{
	struct ff_offer *o = c->offer;

	c->offer = NULL;
	if (!o->sh)
		return ff_xlink_settle(o, h);
	if (await_answer(o) == FF_OFFER_TAKEN) {
		count_answer(o, 1);
		h->chan = o->bell;
		h->shm = o->sh;
		free(o);
		return 1;
	}
	ff_debug("link offer not taken in %d ms: asking the agent", OFFER_WAIT_MS);
	count_answer(o, 0);
	ff_offer_forget(o);
	return 0;
}

/* ---- the accepting side ---- */

/*
 * Keep one drained offer (mu held): in a free slot, after dropping those
 * older than PENDING_KEEP_MS (withdrawn by now), else in the oldest's.
 */
static void pending_add(const struct pending *in)
{
	struct pending *p = NULL;
	int64_t now = ff_now_ms();

	for (int i = 0; i < PENDING_MAX; i++)
		if (pend[i].bell >= 0 && now - pend[i].at > PENDING_KEEP_MS)
			pending_close(&pend[i]);
	for (int i = 0; i < PENDING_MAX && (!p || p->bell >= 0); i++)
		if (!p || pend[i].bell < 0 || pend[i].at < p->at)
			p = &pend[i];
	if (p->bell >= 0)
		pending_close(p);
	*p = *in;
	p->at = now;
	ff_reaper_kick(&reaper, now + PENDING_KEEP_MS);
}

/*
 * Read one datagram from acceptor link l (mu held): 1 if one was read
 * (kept if it is a well-formed offer that l may make), 0 when none is
 * waiting, -1 when l is at EOF or broken (closed).
 */
static int drain_one(struct link *l)
{
	uint8_t buf[256];
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(4 * sizeof(int))];
	} ctl;
	struct iovec iov = { buf, sizeof(buf) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = ctl.b, .msg_controllen = sizeof(ctl.b) };
	int fds[4], nfds = 0;
	const struct ff_attr *ca, *aa, *ch;
	struct pending p = { .memfd = -1, .slot = (int)(l - links), .id = l->id };
	struct ff_msg m;
	struct cmsghdr *cm;
	ssize_t n = ff_real.recvmsg(l->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n <= 0) {
		link_close(l);
		return -1;
	}
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
			int k = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));

			for (int i = 0; i < k && nfds < 4; i++)
				memcpy(&fds[nfds++], CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
		}
	ca = aa = ch = NULL;
	if (!(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) && !ff_msg_decode(buf, (size_t)n, &m) &&
	    m.type == FF_MSG_LINK_OFFER) {
		ca = ff_msg_get(&m, FF_ATTR_LOCAL_EP);
		aa = ff_msg_get(&m, FF_ATTR_REMOTE_EP);
		ch = ff_msg_get(&m, FF_ATTR_CHANNEL);
	}
	/* The memfd comes with a channel's first offer only (and with every unkept one). */
	if (ca && aa && ch && (nfds == 2 || (nfds == 1 && ff_attr_u32(ch)))) {
		p.conn.len = (uint8_t)ca->len;
		memcpy(p.conn.b, ca->val, ca->len);
		p.acc.len = (uint8_t)aa->len;
		memcpy(p.acc.b, aa->val, aa->len);
		p.chan = ff_attr_u32(ch);
		p.bell = fds[0];
		if (nfds == 2)
			p.memfd = fds[1];
		/* Only for the container the link was granted for, to our listener. */
		if (ip_eq(&p.conn, &l->peer) && port_eq(&p.acc, &l->self)) {
			pending_add(&p);
			return 1;
		}
	}
	ff_debug("link: dropped a datagram that is no valid LINK_OFFER for this link");
	for (int i = 0; i < nfds; i++)
		ff_real.close(fds[i]);
	return 1;
}

/* Take the pending offer for conn -> acc out of the table (mu held), or return 0. */
static int pending_take(const struct ep *conn, const struct ep *acc, struct pending *out)
{
	for (int i = 0; i < PENDING_MAX; i++)
		if (pend[i].bell >= 0 && ep_eq(&pend[i].conn, conn) && ep_eq(&pend[i].acc, acc)) {
			*out = pend[i];
			pend[i].bell = pend[i].memfd = -1;
			return 1;
		}
	return 0;
}

/* Keep map as l's channel chan (mu held), in place of the oldest if all are kept. */
static void keep(struct link *l, uint32_t chan, struct ff_shm_map *map)
{
	struct chan *to = &l->chans[0];

	for (int i = 0; i < CHANS_MAX; i++) {
		struct chan *ch = &l->chans[i];

		if (ch->map && ch->id == chan) {
			to = ch;
			break;
		}
		if (to->map && (!ch->map || ch->id < to->id))
			to = ch;
	}
	chan_drop(to, 0);
	*to = (struct chan){ map, chan, -1 };
}

/*
 * The acceptor's end of p's channel: mapped from the memfd that came with
 * the offer (then kept by the link if the connector numbered it), or the
 * one the link keeps under that number. 0, or -errno with *what.
 */
static int accepted_channel(const struct pending *p, struct ff_shm **sh, const char **what)
{
	struct link *l = &links[p->slot];
	int ret = -ENOENT;

	if (p->memfd >= 0) {
		ret = ff_shm_open(p->memfd, FF_SHM_ACCEPTOR, sh, what);
		pthread_mutex_lock(&mu);
		if (!ret && p->chan && l->fd >= 0 && l->id == p->id)
			keep(l, p->chan, ff_shm_map_get(*sh));
		pthread_mutex_unlock(&mu);
		return ret;
	}
	pthread_mutex_lock(&mu);
	for (int i = 0; l->fd >= 0 && l->id == p->id && i < CHANS_MAX; i++)
		if (l->chans[i].map && l->chans[i].id == p->chan)
			ret = ff_shm_adopt(l->chans[i].map, FF_SHM_ACCEPTOR, sh);
	pthread_mutex_unlock(&mu);
	if (ret == -ENOENT)
		*what = "no channel of that number is kept";
	return ret;
}

/* The same-host offer for acc <- conn taken (1, h filled), or none usable (0). */
static int shm_take(const struct ep *acc, const struct ep *conn, struct ff_handover *h)
{
	uint32_t want = FF_OFFER_OFFERED;
	const char *what = "";
	struct pending p;
	int found;

	pthread_mutex_lock(&mu);
	/* Read each link dry: a dead one (EOF) is closed here, not left holding its queue. */
	for (int i = 0; i < nlinks; i++) {
		struct link *l = &links[i];

		if (l->fd >= 0 && l->acceptor && port_eq(&l->self, acc) && ip_eq(&l->peer, conn))
			while (l->fd >= 0 && drain_one(l) > 0)
				;
	}
	found = pending_take(conn, acc, &p);
	pthread_mutex_unlock(&mu);
	if (!found)
		return 0;
	if (!ff_is_socket(p.bell, SOCK_STREAM, 1) || accepted_channel(&p, &h->shm, &what) < 0) {
		/* No word to decide with: our closed bell end sends the connector to the agent too. */
		ff_debug("link offer unusable, asking the agent: %s", *what ? what : "no bell socket");
		pending_close(&p);
		return 0;
	}
	if (p.memfd >= 0)
		ff_real.close(p.memfd);
	if (atomic_compare_exchange_strong(ff_shm_word(h->shm, FF_SHM_OFF_OFFER), &want,
					   FF_OFFER_TAKEN)) {
		atomic_thread_fence(memory_order_seq_cst);
		if (atomic_load_explicit(ff_shm_word(h->shm, FF_SHM_OFF_OFFER_WAIT),
					 memory_order_relaxed))
			ff_real.send(p.bell, "D", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
		h->chan = p.bell;
		return 1;
	}
	/* Withdrawn: the connector gave up waiting and asked the agent. */
	ff_shm_put(h->shm);
	h->shm = NULL;
	ff_real.close(p.bell);
	return 0;
}

int ff_link_take(const struct sockaddr_storage *local, const struct sockaddr_storage *remote,
		 struct ff_handover *h)
{
	int shm = atomic_load_explicit(&any_link, memory_order_relaxed);
	struct ep acc, conn;

	if ((!shm && !ff_xlinks_any()) || to_ep(local, &acc) || to_ep(remote, &conn) ||
	    !agent_there())
		return 0;
	if (shm && shm_take(&acc, &conn, h))
		return 1;
	if (ff_xlinks_any() && ff_xlink_take(&acc, &conn, h))
		return 1;
	ff_debug("no link offer for this connection: asking the agent");
	return 0;
}

void ff_links_unlisten(const struct sockaddr_storage *local)
{
	struct ep lis;

	if (to_ep(local, &lis))
		return;
	ff_xlinks_unlisten(&lis);
	if (!atomic_load_explicit(&any_link, memory_order_relaxed))
		return;
	pthread_mutex_lock(&mu);
	/* The connectors' next offers fail (EPIPE) and go to the agent. */
	for (int i = 0; i < nlinks; i++)
		if (links[i].fd >= 0 && links[i].acceptor && port_eq(&links[i].self, &lis))
			link_close(&links[i]);
	for (int i = 0; i < PENDING_MAX; i++)
		if (pend[i].bell >= 0 && port_eq(&pend[i].acc, &lis))
			pending_close(&pend[i]);
	pthread_mutex_unlock(&mu);
}

/* mu held: close every pending offer and the acceptor links, or (all) every link. */
static void close_links(int all)
{
	for (int i = 0; i < nlinks; i++)
		if (links[i].fd >= 0 && (all || links[i].acceptor))
			link_close(&links[i]);
	for (int i = 0; i < PENDING_MAX; i++)
		if (pend[i].bell >= 0)
			pending_close(&pend[i]);
}

void ff_links_drop_all(void)
{
	if (!atomic_load_explicit(&any_link, memory_order_relaxed))
		return;
	pthread_mutex_lock(&mu);
	/* As for a listener closed: the peers' next offers fail and go to the agent. */
	close_links(1);
	pthread_mutex_unlock(&mu);
}

/* ---- fork ---- */

void ff_links_atfork_prepare(void)
{
	pthread_mutex_lock(&mu);
	ff_xlinks_atfork_prepare();
}

/* Close what this process may no longer use: acceptor links, and in the child all. */
static void after_fork(int child)
{
	ff_xlinks_after_fork(child);
	if (child)
		ff_reaper_forked(&reaper);
	/* The tables are set up (every fd -1) only once a link came. */
	if (!atomic_load_explicit(&any_link, memory_order_relaxed)) {
		pthread_mutex_unlock(&mu);
		return;
	}
	close_links(child);
	pthread_mutex_unlock(&mu);
}

void ff_links_atfork_parent(void)
{
	after_fork(0);
}

void ff_links_atfork_child(void)
{
	after_fork(1);
}
