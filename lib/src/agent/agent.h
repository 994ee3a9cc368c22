/* SPDX-License-Identifier: MIT */
/*
 * The agent concern: the client side of the agent's library socket
 * (docs/PROTOCOL.md, "Session"), this thread's session, the requests, the
 * ledger.
 *
 * The client (agent/client.c, agent/hello.c): every wait is bounded by the
 * timeout given at connect time: the library sits on the connect() path of
 * unmodified programs, so an agent that is slow, wedged or gone must cost
 * at most that bound before the program falls back to plain TCP.
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
#ifndef FREEFLOW_AGENT_H
#define FREEFLOW_AGENT_H

#include <errno.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/core.h"
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

/* ---- agent/session.c: this thread's connection to the agent ---- */

/*
 * This thread's session (connected, HELLO done, listeners re-sent if the
 * agent may have lost them): 0 if it was open already, 1 if just opened,
 * or a -errno (-FF_ELIMIT: the agent refused it, LIMIT).
 */
int ff_control_get(struct ff_agent **out);
/* After a failed request (err < 0): forget the session if ff_agent closed it. */
void ff_control_broken(int err);
/*
 * Whether the agent is there, on this thread's session (opened, or opened
 * anew if the agent went away meanwhile, which re-sends what it lost).
 */
int ff_control_alive(void);
/*
 * A session of the process's own beside the threads' (connected, HELLO
 * done, marked as the library's: a fork child closes it), for requests
 * answered later; 0 or -errno. Valid while pid (its opener) is this
 * process and the application has not taken its fd number. ff_agent_close
 * unmarks and closes it (a->close_fd is ff_fd_close_control), as it does a
 * thread's session. With announce, what the agent may have lost (the
 * listeners, the ledger) is sent again on it first, as a thread's new
 * session does: a new agent (restarted, or another host's after a move).
 */
int ff_control_open_own(struct ff_agent *a, int announce);
/* Which agent socket serves this process now (device and inode of its path), 0 if none. */
uint64_t ff_control_agent_id(void);
int ff_control_own_valid(struct ff_agent *a, pid_t pid);
void ff_control_atfork_child(void);
/* What the sessions tell the code above them (start.c passes listeners.c's). */
struct ff_session_hooks {
	/* A session broke or the agent was not reached: the agent may have lost what it was told. */
	void (*lost)(void);
	/* A thread's session was just opened (HELLO done): re-send what was lost; 0 or -errno. */
	int (*opened)(struct ff_agent *a);
};
/* At start-up, before any session: reads FREEFLOW_AGENT_SOCKET, keeps a copy of *h. */
void ff_control_init(const struct ff_session_hooks *h);

/* ---- agent/requests.c: what the library asks the agent ---- */

/*
 * CONNECT/ACCEPT for the connection local -> remote on this thread's
 * session: 0 with the reply in r (PATH or ERROR; the caller closes its
 * fds, ff_reply_close_fds), or -errno (-EADDRNOTAVAIL: loopback, not
 * asked; -FF_ELIMIT: the agent refused the session).
 */
int ff_ask(uint8_t msg, const struct sockaddr_storage *local,
	   const struct sockaddr_storage *remote, struct ff_reply *r);
/*
 * Best-effort LISTEN / UNLISTEN / CLOSED; the result only says if the agent
 * took it (for CLOSED, a notification never answered: that it was sent).
 */
int ff_announce(uint8_t msg, const struct sockaddr_storage *local,
		const struct sockaddr_storage *remote);
/* The same on a given session (the one being opened). */
int ff_announce_on(struct ff_agent *a, uint8_t msg, const struct sockaddr_storage *local,
		   const struct sockaddr_storage *remote);

/* LEDGER on this thread's session, or on session a: 0 or -errno. */
int ff_send_ledger(int memfd);
int ff_send_ledger_on(struct ff_agent *a, int memfd);
/*
 * LINK_FILL on session a, answered later (ff_agent_await): the request's
 * seq, or -errno. Then the stock its PATH reply r carries into fds (cap of
 * them): their number, -ENOENT if the agent no longer knows the link, or
 * another -errno.
 */
int64_t ff_link_fill_send(struct ff_agent *a, uint64_t link, uint32_t count);
int ff_link_fill_read(struct ff_reply *r, int *fds, int cap);
/*
 * WATCH on a (a session of the process's own): answers the PARK before
 * it (parked 1, or 0 with why; -1: none came before) and asks for the
 * next. Its seq, or -errno.
 */
int64_t ff_watch_send(struct ff_agent *a, int parked, const char *why);
/*
 * The PARK in r: its endpoints as their wire bytes (ff_endpoint's) and
 * its TCP socket, which the caller then owns; 0, or -EPROTO for anything
 * else (r's fds closed either way).
 */
struct ff_park {
	uint8_t local[FF_EP6_LEN], remote[FF_EP6_LEN];
	uint8_t local_len, remote_len;
	int adopt;		/* FOUND 1: its peer parked it first; park only if switch_by says so */
	int sock;		/* PARK: this end's TCP socket; RESUME: the new channel's memfd */
	uint32_t role;		/* RESUME: this end's enum ff_shm_role; 0 for a PARK */
	int bell;		/* RESUME of a parked connection: this end's new bell; else -1 */
};
int ff_park_read(struct ff_reply *r, struct ff_park *p);

/* ---- ledger.c: this process's live connections, as the agent reads them ---- */

/*
 * Make the ledger and hand it to the agent (once per process): 0 when the
 * agent has it, else -errno (then no link may be used).
 */
int ff_ledger_ready(void);
/* A session was opened (a): make the ledger and send it on a, unless it is made already or being made. */
void ff_ledger_first(struct ff_agent *a);
/* Whether the agent has the ledger already (ff_ledger_ready without sending it). */
int ff_ledger_held(void);
/* Reserve an entry for a connection about to be decided; 0: none free (or no ledger). */
uint64_t ff_ledger_reserve(void);
/* A connection as its ledger entry lists it. */
struct ff_ledger_row {
	int fd;
	const struct ff_ends *ends;
	uint8_t path;		/* a PATH_KIND */
	uint32_t bytes;		/* shm memory held, else 0 */
	const char *reason;	/* why overlay, or why unix is not shm; NULL: none */
	/*
	 * Decided without the agent, over a link or (overlay) for a peer
	 * without the library, and counted in the header for it; else
	 * answered by the agent, which counts it itself.
	 */
	int alone;
};
/* Fill reserved entry e with row and list it. */
void ff_ledger_publish(uint64_t e, const struct ff_ledger_row *row);
/*
 * Set in a fork child and in an exec'd image that adopted connections:
 * they hold connections their own ledger does not list yet (their
 * parent's, or the old image's, entries do).
 */
extern _Atomic int ff_ledger_inherit_pending;
/* No lock held: list them, once (it may open an agent session and make the ledger). */
void ff_ledger_list_inherited(void);
/* At a data call on a swapped fd: a child lists what it holds when it first uses it. */
static inline void ff_ledger_inherited(void)
{
	if (atomic_load_explicit(&ff_ledger_inherit_pending, memory_order_relaxed))
		ff_ledger_list_inherited();
}
/*
 * The connection of entry e moved to the socket now at fd: path unix,
 * "moved-down" (a socket pair), or overlay, "parked" (TCP at its tuple);
 * ends, unless NULL, are its endpoints now.
 */
void ff_ledger_moved(uint64_t e, int fd, uint8_t path, uint32_t bytes, const char *reason,
		     const struct ff_ends *ends);
/* Give back a reserved entry that was not published (0: nothing). */
void ff_ledger_release(uint64_t e);
/* The connection of entry e is closed: unlist it. */
void ff_ledger_close(uint64_t e);
/* fork: the child's ledger is its parent's; it makes its own when it gets links. */
void ff_ledger_atfork_prepare(void);
void ff_ledger_atfork_locked(void);	/* after the table lock */
void ff_ledger_atfork_parent(void);
void ff_ledger_atfork_child(void);
/* On a session just opened after one broke: LEDGER again, if there is a ledger. */
int ff_ledger_resend(struct ff_agent *a);

#endif
