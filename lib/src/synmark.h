/* SPDX-License-Identifier: MIT */
/*
 * The SYN mark (docs/PROTOCOL.md, "The SYN mark"): a connecting library
 * marks the SYN of every connection it will ask its agent about, so an
 * accepting library can tell from the SYN alone that a connector has no
 * library, and then costs it no wait and no round trip to the agent.
 */
#ifndef FREEFLOW_SYNMARK_H
#define FREEFLOW_SYNMARK_H

#include "shim.h"

/* The IP TOS byte (IPv6 traffic class) of a marked SYN: DSCP 3, RFC 2474's pool for local use. */
#define FF_SYN_TOS	0x0c
#define FF_SYN_TOS_MASK	0xfc	/* the DSCP bits; the kernel owns ECN's two */

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

#endif
