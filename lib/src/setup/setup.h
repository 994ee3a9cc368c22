/* SPDX-License-Identifier: MIT */
/*
 * The setup concern: the decision (negotiate.c: CONNECT/ACCEPT, the swap),
 * a connection's teardown (conn.c), the listeners the agent knows of
 * (listeners.c), the SYN mark (synmark.c), first contacts (contact.c) and the
 * settler (settler.c).
 */
#ifndef FREEFLOW_SETUP_H
#define FREEFLOW_SETUP_H

#include <stdint.h>
#include <sys/socket.h>

#include "agent/agent.h"
#include "core/core.h"

/* ---- negotiate.c ---- */

/* Negotiate fd (connected, its conn in NEGOTIATING) with msg CONNECT/ACCEPT. */
void ff_negotiate(int fd, struct ff_conn *c, uint8_t msg);
/*
 * A data call on fd is about to run. Returns 0 to go on (decision made or
 * fd untracked), or -errno the call must fail with (e.g. -EAGAIN while a
 * non-blocking connect is still in progress).
 */
int ff_settle_slow(int fd, int nonblock);

/* ---- conn.c ---- */

/* Table lock held: c's last reference is gone; its shared memory, offer and c itself go. */
void ff_conn_free(struct ff_conn *c);

/* ---- listeners.c: keeping the agent's listener table in step ---- */

/* The agent may have forgotten this process's listeners (session broke, fork). */
void ff_listeners_lost(void);
/* On a session just opened: re-send LISTEN if something was lost. 0 or -errno. */
int ff_listeners_resync(struct ff_agent *a);
/* LISTEN took: note who registered c (table lock held). */
void ff_listener_registered(struct ff_conn *c, int ok);
/*
 * Listener fd accepts by a route the shim does not see (why: io_uring):
 * UNLISTEN if this process registered it, its links closed, and it is not
 * registered again, so its connectors take the overlay at once
 * (listener-not-freeflow) instead of waiting for an ACCEPT that cannot
 * come. Nothing if fd is no listener or was withdrawn already.
 */
void ff_listener_withdraw(int fd, const char *why);

/*
 * ---- synmark.c: the SYN mark (docs/PROTOCOL.md, "The SYN mark") ----
 * A connecting library marks the SYN of every connection it will ask its
 * agent about, so an accepting library can tell from the SYN alone that a
 * connector has no library, and then costs it no wait and no round trip to
 * the agent. The mark's value is FF_SYN_TOS (freeflow/proto.h).
 */

/*
 * Table lock held, before connect() on c's fd: the SYN gets the mark and
 * keeps it until ff_syn_unmark (retransmitted SYNs too). -errno if the
 * mark could not be set: then the connection must not be negotiated.
 */
int ff_syn_mark(int fd, struct ff_conn *c);
/* Table lock held: c's fd is decided (or failed): the application's own values come back. */
void ff_syn_unmark(int fd, struct ff_conn *c);
/*
 * Table lock held: setsockopt/getsockopt of IP_TOS or IPV6_TCLASS while
 * the mark is on, answered from what the application set. 1: not held.
 */
int ff_syn_held_set(struct ff_conn *c, int level, int name, const void *val, socklen_t len);
int ff_syn_held_get(const struct ff_conn *c, int level, int name, void *val, socklen_t *len);
/*
 * keep 1, before listen(): the kernel keeps each SYN this listener gets,
 * for ff_syn_unmarked; 0: no more (a listener whose accepts are never
 * negotiated, unless the application keeps SYNs itself).
 */
void ff_syn_keep(int fd, int keep);
/*
 * An accepted connection of a listener of family: 1 if its SYN was kept
 * and carries no mark (the connector has no library), 0 if marked or not
 * known (no SYN kept: syncookies, or a listener older than ff_syn_keep).
 * For 1, *local and *remote get the connection's addresses as
 * getsockname/getpeername would, from the SYN (their family AF_UNSPEC
 * where it does not say them), which spares two system calls.
 */
int ff_syn_unmarked(int fd, int family, struct sockaddr_storage *local, struct sockaddr_storage *remote);

/*
 * Whether one of this process's listeners is at `to`: its port, and its
 * address or (*any_addr set) any address.
 */
int ff_listening_at(const struct sockaddr_storage *to, int *any_addr);

/*
 * ---- contact.c: connects wait for the link a first connection may bring ----
 */

/*
 * connect(fd) to sa is about to send its SYN (conn at fd) and no link
 * leads there: if the first connection to sa is undecided, decide it (once
 * complete) or wait for it (5 ms at most), and return 1: look for a link
 * again. Else 0: ask the agent (this may be the first connection). No
 * lock held.
 */
int ff_contact_await(int fd, struct ff_conn *conn, const struct sockaddr *sa, socklen_t len);
/* The agent decided a connection to remote; linked: a link to remote came with it. */
void ff_contact_done(const struct sockaddr_storage *remote, int linked);
void ff_contacts_atfork_prepare(void);
void ff_contacts_atfork_parent(void);
void ff_contacts_atfork_child(void);

/*
 * ---- settler.c: the settler ----
 * A library thread that decides a non-blocking connect the program has not
 * looked at a few ms after it completed.
 */

enum ff_settle_kind {
	FF_SETTLE_PLAIN,		/* asks the agent */
	FF_SETTLE_OFFERED,		/* offered over a link; bell: the offer's bell socket */
	FF_SETTLE_OFFERED_ACROSS,	/* offered over a cross-host link */
};

/*
 * fd's connect is in progress (its conn PENDING): decide it once it
 * completes, if the program has not by then (settler.c says when).
 */
void ff_settler_watch(int fd, struct ff_conn *c, enum ff_settle_kind kind, int bell);
/* Forks so far, for ff_settler_decide. */
unsigned ff_settler_forks(void);
/*
 * Decide fd's pending connect (conn c) now, in this thread, as the settler
 * would: not if a fork came since forks_seen (ff_settler_forks), and a
 * fork waits for it.
 */
void ff_settler_decide(int fd, struct ff_conn *c, unsigned forks_seen);
/* fork: what is pending now is the program's to decide, in either process; waits for decisions under way. */
void ff_settler_atfork_prepare(void);
/* After fork, in the parent: decisions may start again. */
void ff_settler_atfork_parent(void);
/* In a fork child: the thread is the parent's. */
void ff_settler_atfork_child(void);

#endif
