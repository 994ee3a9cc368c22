/* SPDX-License-Identifier: MIT */
/*
 * rdma_cm on the virtual verbs device (docs/VERBS.md, "rdma_cm"). The
 * stock librdmacm opens /dev/infiniband/rdma_cm (in a container, /dev/null)
 * and writes commands to it: `struct rdma_ucm_cmd_hdr` and the command,
 * answers going through the command's response pointer. write() on such an
 * fd (FF_FD_RDMACM) comes here and is answered as the kernel's rdma_ucm
 * would: RC ids (RDMA_PS_TCP, RDMA_PS_IB) and UD ids (RDMA_PS_UDP), over
 * IPv4 and IPv6.
 *
 * The connection manager's messages (REQ, REP, RTU, REJ, DREQ, DREP, MRA) go
 * over a plain TCP connection between the two processes, on the overlay:
 * an id bound to port P holds a TCP socket bound to P, so rdma_cm ports
 * share TCP's port space, as on iWARP. Each side puts its QPN, PSN, LID
 * and GID in its REQ or REP, so INIT_QP_ATTR gives the peer's identity
 * as its own device has it (whatever address the peer is reached at).
 * The sockets are the kernel's (ff_real), not the library's fast path.
 *
 * Files: rdmacm.c the commands, cm_chan.c the channels, their events and
 * the ids, cm_link.c the TCP connections and their thread.
 *
 * One thread per process serves the sockets and the deadlines of ids that
 * wait for their peer (poll, asleep while nothing happens); events queue
 * per channel. GET_EVENT waits for one (EAGAIN with O_NONBLOCK). So that
 * poll() on the channel works as on the kernel's file, the fd becomes the
 * master of a pseudo-terminal in raw mode (still a character device, which
 * librdmacm checks), holding one byte while any event is queued.
 *
 * Locking: one mutex (ff_cm.mu) guards every channel, id and event; the
 * thread does its socket I/O under it (messages are small, sockets
 * non-blocking) and sleeps in poll without it; fork takes it (fork_child).
 */
#ifndef FREEFLOW_CALLS_RDMACM_H
#define FREEFLOW_CALLS_RDMACM_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>

#include <rdma/rdma_user_cm.h>

#include "calls/calls.h"

/* What the kernel's CM gives in a REJECTED event's status (IBTA reject reasons). */
enum { REJ_INVALID_SERVICE_ID = 8, REJ_CONSUMER_DEFINED = 28 };
enum { CM_MAX_IDS = 4096 };

/*
 * How long the CM waits for its peer (docs/VERBS.md, "rdma_cm", Events).
 * The kernel's CM resends a REQ every ~4.6 s (CMA_CM_RESPONSE_TIMEOUT 20,
 * plus twice the packet life) and gives up after CMA_MAX_CM_RETRIES (15)
 * resends; a REP every ~4.1 s, likewise. Over TCP nothing is lost, so a
 * peer whose CM thread answers neither the message nor with an MRA within
 * CM_RESPONSE_MS is frozen or gone: UNREACHABLE (-ETIMEDOUT), or
 * DISCONNECTED (-ETIMEDOUT) for a DREQ. The peer's MRA (its program has
 * the REQ or REP queued and has not answered yet) gives it CM_MRA_MS, the
 * kernel's MRA service timeout 24 (4.096 us << 24, which cm.c rounds to
 * 2^16 ms); then the REQ or REP is sent again, so a live peer MRAs it
 * again, up to CM_MAX_RETRIES times, as the kernel's CM resends it.
 */
enum {
	CM_CONNECT_MS = 10000,		/* the TCP connect */
	CM_RESPONSE_MS = 10000,		/* a REQ, REP or DREQ: an answer or an MRA */
	CM_MRA_MS = 65536,		/* after an MRA */
	CM_MAX_RETRIES = 15,		/* CMA_MAX_CM_RETRIES: resends after an MRA's time */
};

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

enum { M_REQ = 1, M_REP, M_RTU, M_REJ, M_DREQ, M_DREP, M_MRA };
/* cm_msg.flags: what the sender's CM speaks (a library before MRAs sent 0 and drops an MRA). */
enum { CMF_MRA = 1 };

/*
 * One CM message on the TCP connection; integers in network order. An RC
 * id's connection carries REQ, REP, RTU, then DREQ and DREP (or a REJ); a
 * UD id's only the REQ and the REP (or REJ), as IB's SIDR, and ends. The
 * side that queues a REQ (RC or UD) or an RC REP to its program answers it
 * with an MRA (message receipt acknowledgement, no fields of its own) if
 * the message had CMF_MRA, and again each time it is resent (CM_MRA_MS).
 */
struct cm_msg {
	uint8_t magic[4];		/* "FFCM" */
	uint8_t type, pd_len, resp_res, init_depth;
	uint8_t flow_control, retry, rnr_retry, srq;
	uint32_t qpn, psn, reason, qkey;
	uint16_t lid, flags;
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
	int bell;			/* the pty's slave: one byte while events are queued; -1 none */
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
	int64_t deadline;		/* S_CONNECTING, S_REQ_SENT, S_REP_SENT, S_DREQ_SENT: ff_now_ms */
	int mra;			/* S_REQ_SENT, S_REP_SENT: the peer MRA'd our message */
	int retries;			/* resends of our REQ or REP left */
	int timeout_set;		/* RDMA_OPTION_ID_ACK_TIMEOUT given: timeout for RTS */
	uint8_t timeout;
};

/* The state of every channel and id (one per process). */
struct cm_state {
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
};
extern struct cm_state ff_cm;

/* ---- cm_chan.c: the device, channels and their events, ids ---- */

/* The channel open as fd, or NULL. */
struct cm_chan *cm_chan_of(int fd);
/*
 * c's bell after its queue changed (had: whether it held events before):
 * one byte in the pseudo-terminal while any is queued, so poll() reports
 * the channel readable as the kernel's file (level, not one byte per
 * event, which a full pty buffer would block).
 */
void cm_bell_sync(struct cm_chan *c, int had);
/*
 * An event queued on c, counted in counted's events (DESTROY_ID's
 * events_reported); m: the peer's message, for the event's parameters.
 */
void cm_queue_event(struct cm_id *counted, struct cm_chan *c, uint64_t uid, uint32_t handle,
		    uint32_t event, int status, const struct cm_msg *m);
/* An event of id, on its channel. */
void cm_id_event(struct cm_id *id, uint32_t event, int status, const struct cm_msg *m);
/* id's queued events taken off its channel: onto to (MIGRATE_ID), or freed if to is NULL. */
void cm_unqueue(struct cm_id *id, struct cm_chan *to);
/* c freed, with its ids and events (its file is gone for good). */
void cm_chan_drop(struct cm_chan *c);
/* A new id on c (no handle yet), or NULL. */
struct cm_id *cm_id_new(struct cm_chan *c, uint16_t ps);
/* A handle for id: 0 or -ENOMEM. */
int cm_id_handle(struct cm_id *id);
/* id freed: its events, its handle, its accepted ids, its socket. */
void cm_id_free(struct cm_id *id);
/* The id of c with that handle, or NULL (the kernel's EINVAL). */
struct cm_id *cm_id_of(struct cm_chan *c, uint32_t handle);

/* ---- cm_link.c: the CM's TCP connections and their thread ---- */

/* The sockets' thread told a socket came, went or changed what it waits for. */
void cm_wake_thread(void);
/* id's socket closed (the peer reads EOF). */
void cm_close_sock(struct cm_id *id);
/* The sockets' thread running (started once per process): 0 or -errno. */
int cm_start_thread(void);
/* The length of the sockaddr_in or sockaddr_in6 at sa. */
socklen_t cm_sa_len(const void *sa);
/* Whether sa is AF_INET or AF_INET6. */
int cm_family_ok(const void *sa);
/* id gets a TCP socket bound to addr (port 0: one the kernel picks), as BIND_IP reserves it. */
int cm_bind_id(struct cm_id *id, const struct sockaddr_in6 *addr);
/* A message of type (tmpl's fields, or none) with our PSN, LID and GID sent: 0 or -ECONNRESET. */
int cm_send_msg(struct cm_id *id, int type, const struct cm_msg *tmpl);
/*
 * id sends a message its peer must answer (REQ, REP or DREQ): its state st,
 * and the peer has CM_RESPONSE_MS to answer or MRA it.
 */
void cm_await(struct cm_id *id, enum state st);
/* The active side's connect failed with err: its event. */
void cm_connect_failed(struct cm_id *id, int err);
/* The peer's end of id's connection went: what the kernel's CM would tell. */
void cm_peer_gone(struct cm_id *id);
/* A first PSN (24 bits) of id's own. */
uint32_t cm_new_psn(const struct cm_id *id);

#endif
