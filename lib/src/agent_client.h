/* SPDX-License-Identifier: MIT */
/*
 * Client side of the agent's library socket (docs/PROTOCOL.md, "Session").
 *
 * Every wait is bounded by the timeout given at connect time: the library
 * sits on the connect() path of unmodified programs, so an agent that is
 * slow, wedged or gone must cost at most that bound before the program
 * falls back to plain TCP.
 *
 * Return convention: 0 on success; a positive wire error code (enum ff_err)
 * when the agent answered with ERROR, the connection staying usable; a
 * negative errno when the transport or the reply failed, in which case the
 * connection has been closed (a late reply must never be read as the answer
 * to the next request). Nothing here sets errno.
 *
 * One struct ff_agent carries at most one outstanding request (the protocol
 * allows no more), so callers serialize its use.
 */
#ifndef FREEFLOW_AGENT_CLIENT_H
#define FREEFLOW_AGENT_CLIENT_H

#include <errno.h>
#include <stdint.h>
#include <sys/socket.h>

#include "freeflow/proto.h"

#define FF_AGENT_SOCK_PATH	"/run/freeflow/agent.sock"
/* Sent as LIB_VERSION in HELLO unless the caller gives another. */
#define FF_LIB_VERSION		"0.1.0"
/* Fds one reply may carry; more is a protocol error. */
#define FF_AGENT_MAX_FDS	16	/* a LINK_FILL's answer: COUNT is at most 16 */
/*
 * Largest reply on the library socket. The biggest defined one, an ERROR
 * with a full ERR_MSG, is about 1 KiB; the rest is room for attributes of
 * later minor versions. Kept small because it lives on the stack of
 * whichever application thread called connect().
 */
#define FF_AGENT_REPLY_MAX	4096

struct ff_agent {
	int fd;
	int timeout_ms;
	uint32_t seq;
	/*
	 * How ff_agent_close closes fd; NULL (as connect and attach leave it):
	 * libc's close. A library session sets it once the fd is marked in the
	 * fd table, so the mark goes with the close (ff_fd_close_control).
	 */
	int (*close_fd)(int fd);
};

/* A reply: msg points into buf; fds are open, close-on-exec, owned by the caller. */
struct ff_reply {
	uint8_t buf[FF_AGENT_REPLY_MAX];
	struct ff_msg msg;
	int fds[FF_AGENT_MAX_FDS];
	unsigned int nfds;
};

struct ff_hello_info {
	char agent_version[65];
	char container_id[256];
	char name[256];
	char tenant[256];
	char host[256];
	uint8_t ip[16];
	uint8_t ip_len;
};

struct ff_lookup_info {
	uint8_t found;
	uint8_t local;
	uint8_t freeflow;
	char name[256];
	char host[256];
	char tenant[256];
	uint8_t ip[16];
	uint8_t ip_len;
};

/* Connect to the agent socket at path, waiting at most timeout_ms. */
int ff_agent_connect(struct ff_agent *a, const char *path, int timeout_ms);

/*
 * The refusal of ff_agent_verify: an errno nothing else on the way to a
 * session returns (connect, HELLO), so callers can tell an agent that is
 * not trusted from one that is not there.
 */
#define FF_EUNTRUSTED	EKEYREJECTED
/* The agent's LIMIT to a HELLO: this container holds all the sessions it may. */
#define FF_ELIMIT	EUSERS

/*
 * Whether the process serving a's connection may be the agent, as the
 * kernel tells it (SO_PEERCRED: who called listen() on the socket): root,
 * and invisible from this pid namespace (pid 0 here), as an agent outside
 * the caller's container is; a process of this pid namespace, or of one
 * below it, is refused. *peer gets what the kernel said. Returns 0,
 * -FF_EUNTRUSTED, or another negative errno if the kernel did not say.
 * docs/ARCHITECTURE.md, "Identity and trust", says what this proves.
 */
int ff_agent_verify(const struct ff_agent *a, struct ucred *peer);

/* err (negative) in words for FREEFLOW_DEBUG: strerror's, or what FF_EUNTRUSTED or FF_ELIMIT mean. */
const char *ff_agent_strerror(int err);

/* Take over an already connected SOCK_SEQPACKET socket (it becomes non-blocking). */
int ff_agent_attach(struct ff_agent *a, int fd, int timeout_ms);

void ff_agent_close(struct ff_agent *a);

/* Next seq for a request encoded by the caller. */
uint32_t ff_agent_next_seq(struct ff_agent *a);

/*
 * Send one encoded request and wait for its reply, which must carry the
 * request's seq and be of type want or ERROR. Returns 0 (the reply may be an
 * ERROR; r->msg says) or a negative errno.
 */
int ff_agent_request(struct ff_agent *a, const void *req, int len,
		     uint8_t want, struct ff_reply *r);

/*
 * The two halves of ff_agent_request, for a request whose reply is taken
 * later (a cross-host link's LINK_FILL): send it; then wait at most wait_ms
 * for the reply to seq. With wait_ms 0, -EAGAIN says it has not come yet
 * and the session stays; any other failure closes it.
 */
int ff_agent_send(struct ff_agent *a, const void *req, int len);
int ff_agent_await(struct ff_agent *a, uint32_t seq, uint8_t want, struct ff_reply *r,
		   int wait_ms);

/*
 * Send one encoded notification (CLOSED, LEDGER), with fd unless it is -1,
 * which the agent never answers, so there is no reply to wait for and none
 * that a later request could read as its own. Returns 0 or a negative
 * errno (the connection then closed).
 */
int ff_agent_notify(struct ff_agent *a, const void *msg, int len, int fd);

/* Close the fds a reply carried and that the caller did not take. */
void ff_reply_close_fds(struct ff_reply *r);

/*
 * HELLO / LOOKUP round trips; see the return convention above. HELLO is for
 * the library socket: a reply without the caller's identity (as the admin
 * socket gives) is a protocol error here.
 */
int ff_agent_hello(struct ff_agent *a, const char *lib_version,
		   struct ff_hello_info *out);
int ff_agent_lookup(struct ff_agent *a, const uint8_t *ip, int ip_len,
		    struct ff_lookup_info *out);

#endif
