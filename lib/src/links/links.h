/* SPDX-License-Identifier: MIT */
/*
 * The links concern: what same-host links (link.c) and cross-host links
 * (xlink.c) share (the wire form of an endpoint, the connector's binding
 * before its SYN, the offer a connect() carries until the connection is
 * decided), and their entry points.
 */
#ifndef FREEFLOW_LINKS_H
#define FREEFLOW_LINKS_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "core/core.h"
#include "freeflow/proto.h"

/*
 * A table's reaper (reaper.c): a thread that calls expire, with outer (if
 * any) then mu held, at each end it returns, until it returns 0. thread is
 * the table's own start routine, which calls ff_reaper_run with it.
 */
struct ff_reaper {
	pthread_mutex_t *mu;		/* the table's lock, held through the wait */
	pthread_mutex_t *outer;		/* taken before mu around expire, or NULL */
	int64_t (*expire)(void);	/* close what ended; the next end (ms, monotonic), 0: none left */
	void *(*thread)(void *);
	pthread_cond_t cv;		/* wakes it for something that ends first */
	int ready;			/* cv made */
	int running;
	int64_t next;			/* the end it sleeps until, while running */
};
void *ff_reaper_run(struct ff_reaper *r);
/* See that the reaper runs, woken if something new ends before it would look (mu held). */
void ff_reaper_kick(struct ff_reaper *r, int64_t end);
/* In a fork child, under mu: no reaper runs there. */
void ff_reaper_forked(struct ff_reaper *r);

/* An endpoint as the wire names it (ff_endpoint): address then port. */
struct ep {
	uint8_t b[FF_EP6_LEN];
	uint8_t len;
};

static inline int to_ep(const struct sockaddr_storage *sa, struct ep *e)
{
	int n = ff_endpoint(sa, e->b);

	e->len = n > 0 ? (uint8_t)n : 0;
	return n > 0 ? 0 : -1;
}

static inline int ep_eq(const struct ep *a, const struct ep *b)
{
	return a->len == b->len && !memcmp(a->b, b->b, a->len);
}

/* Same address, whatever the port. */
static inline int ip_eq(const struct ep *a, const struct ep *b)
{
	return a->len == b->len && !memcmp(a->b, b->b, a->len - 2u);
}

static inline int port_eq(const struct ep *a, const struct ep *b)
{
	return !memcmp(a->b + a->len - 2, b->b + b->len - 2, 2);
}

/*
 * fd's local endpoint, binding it first to self's address and an
 * ephemeral port if the application did not bind it; -1 if it is bound to
 * another address (it then connects as it would anyway).
 */
int ff_link_bind_local(int fd, const struct ep *self, struct ep *local);

/*
 * A connection offered over a link, until it is decided. Same host: sh is
 * the connector's end of the offered channel and bell its bell socket.
 * Cross host: sh is NULL and bell is the stock connection that carried
 * the offer, written at sent.
 */
struct ff_offer {
	struct ff_shm *sh;
	int bell;
	int slot;		/* the link it went over, while its id is unchanged */
	uint64_t id;
	uint32_t chan;		/* the link's number of the channel; 0: not kept */
	int64_t sent;		/* cross host: ms, CLOCK_MONOTONIC */
	/*
	 * The acceptor, as connect() named it: once the offer is taken, the
	 * acceptor resets the overlay socket, so getpeername may fail.
	 */
	struct sockaddr_storage dst;
	socklen_t dstlen;
};

/* What a fast path hands over: the channel, and for shm its mapped memory. */
struct ff_handover {
	int chan;		/* the socket to put at the fd (shm: the bell socket) */
	struct ff_shm *shm;	/* NULL unless shm */
};

/* ---- link.c: same-host connections set up without the agent ---- */

/* Keep link fd, which came with the shm PATH of local -> remote (our role: acceptor or not). */
void ff_link_add(int fd, int acceptor, const struct sockaddr_storage *local,
		 const struct sockaddr_storage *remote, uint32_t ttl_ms, uint32_t ring);
/*
 * connect(fd, sa) is about to send its SYN: if a link leads to sa, bind fd
 * if needed and offer the connection over it. The offer, or NULL (then
 * the connection asks the agent as usual; *none: no link leads to sa). No
 * lock held.
 */
struct ff_offer *ff_link_offer(int fd, const struct sockaddr *sa, socklen_t len, int *none);
/* The connection was not made (or is dropped): withdraw the offer and free it (NULL: nothing). */
void ff_offer_free(struct ff_offer *o);
/* The acceptor's address connect() was given. */
void ff_offer_peer(const struct ff_offer *o, struct sockaddr_storage *sa, socklen_t *len);
/*
 * The TCP connection ended before the decision: 1 if the acceptor took the
 * offer anyway (it resets the overlay socket as it swaps), else 0 and the
 * offer is withdrawn.
 */
int ff_offer_taken(struct ff_offer *o);
/* A fork child's copy of its parent's offer: free it, deciding nothing. */
void ff_offer_forget(struct ff_offer *o);
/*
 * The connection with c->offer is established: wait (at most 5 ms) for
 * the acceptor. 1: taken, h filled; 0: not taken, ask the agent. c->offer
 * is consumed.
 */
int ff_offer_settle(struct ff_conn *c, struct ff_handover *h);
/* An accepted connection: its offer from a link taken (1, h filled), or none: ask the agent (0). */
int ff_link_take(const struct sockaddr_storage *local, const struct sockaddr_storage *remote,
		 struct ff_handover *h);
/* The listener at local is closed: its links and the offers they brought go. */
void ff_links_unlisten(const struct sockaddr_storage *local);
/* The process keeps off shm (routes.c): every same-host link and pending offer goes. */
void ff_links_drop_all(void);
void ff_links_atfork_prepare(void);
void ff_links_atfork_parent(void);
void ff_links_atfork_child(void);

/* ---- xlink.c: the cross-host half of link.c's entry points ---- */

/* Whether any cross-host link exists (one load). */
int ff_xlinks_any(void);
/* Offer fd's connection to `to` over a cross-host link into o: 0, or -ENOENT (no link) / -errno. */
int ff_xlink_offer(int fd, const struct ep *to, struct ff_offer *o);
/* The connection with cross-host offer o is established: 1 committed (h filled), 0 not. Frees o. */
int ff_xlink_settle(struct ff_offer *o, struct ff_handover *h);
/* An accepted connection acc <- conn: its cross-host offer taken and committed (1, h filled), or 0. */
int ff_xlink_take(const struct ep *acc, const struct ep *conn, struct ff_handover *h);
/*
 * A blocking accept() on listener lfd is about to wait: wait here instead,
 * answering offers over its cross-host links as they come. 0: go on with
 * accept(); -1 (errno EINTR): return that, as accept() would have.
 */
int ff_xlink_before_accept(int lfd);
/*
 * Close fd, an accepted overlay socket set to reset (negotiate.c), when the
 * process next waits in a blocking accept() on a listener with cross-host
 * links, so its reset costs nothing between accept() and the first byte;
 * at once if too many wait already.
 */
void ff_xlink_close_later(int fd);
/* Drop every cross-host link (the agent is gone). */
void ff_xlinks_drop(void);
/* The listener at lis closed: its cross-host links go. */
void ff_xlinks_unlisten(const struct ep *lis);
/* fork: lock before, then close what link.c's after_fork closes, and unlock. */
void ff_xlinks_atfork_prepare(void);
void ff_xlinks_after_fork(int child);
/* Keep a cross-host link that came with a PATH host-tcp (negotiate.c). */
void ff_xlink_add(const struct sockaddr_storage *local, const struct sockaddr_storage *remote,
		  uint32_t ttl_ms, uint64_t name, int listener, const uint8_t *token);

#endif
