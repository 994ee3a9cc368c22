/* SPDX-License-Identifier: MIT */
/*
 * verbs: the virtual RDMA device's provider (libffv-rdmav34.so), which the
 * stock libibverbs loads from RDMAV_DRIVERS and matches to the device
 * `freeflow run` describes in the container's sysfs tree (SYSFS_PATH).
 * docs/VERBS.md says how it is found, what it answers, and why.
 *
 * Built against rdma-core's provider headers (scripts/install-deps.sh
 * fetches Debian's source package and generates them); private ABI 34,
 * bookworm's libibverbs 44 and every release up to 56.
 *
 * Locking: one mutex per context (ctx->mu) guards its PDs, MRs, CQs and
 * QPs and the agent session; the data path runs under it, also on the
 * context's event thread (events.c). The process's shared regions (mr.c)
 * have a lock of their own, taken inside ctx->mu.
 */
#ifndef FF_VERBS_H
#define FF_VERBS_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include <infiniband/driver.h>

#include "freeflow/verbs_layout.h"

/* The device as the container's sysfs tree gives it (device.c). */
struct ffv_device {
	struct verbs_device vdev;
	uint16_t lid;
	uint64_t node_guid;		/* network order, as ibv_device_attr has it */
	uint8_t gid[16];
};

/* Limits the device reports (docs/VERBS.md, "Limits"). */
enum {
	FFV_MAX_QP = 2048,	/* the agent holds at most 2048 memfds per container (ARCHITECTURE.md, "Limits") */
	FFV_MAX_QP_WR = 16384,
	FFV_MAX_SGE = 32,
	FFV_MAX_CQ = 4096,
	FFV_MAX_CQE = 1 << 20,
	FFV_MAX_MR = 1 << 16,
	FFV_MAX_PD = 1 << 16,
	FFV_MAX_SRQ = 1024,
	FFV_MAX_SRQ_WR = 16384,
	FFV_MAX_RD_ATOM = 16,
	FFV_MAX_AH = 1 << 16,
};

struct ffv_mr;
struct ffv_qp;
struct ffv_grant;

struct ffv_context {
	struct verbs_context vctx;
	pthread_mutex_t mu;		/* taken with ffv_lock, but in ibv_poll_cq */
	uint64_t gen;			/* ffv_lock's count: a CQ's quiet snapshot holds while unchanged (cq.c) */
	int agent;			/* the provider's agent session (agent.c), -1 until needed */
	uint32_t seq;
	uint32_t next_pd;
	struct ffv_mr *mrs;		/* every MR of the context, by lkey (mr.c) */
	struct ffv_qp *qps;		/* every QP, for the CQs' progress (qp.c) */
	struct ffv_grant *grants;	/* peers' regions mapped here (mr.c) */
	uint32_t nsrq;			/* SRQs made (srq.c), at most FFV_MAX_SRQ */
	/*
	 * Asynchronous events (events.c): libibverbs reads them from the read
	 * end of a pipe, vctx.context.async_fd; we write async_w (non-blocking)
	 * and read async_r (non-blocking, our own) to take back those naming
	 * an object being destroyed.
	 */
	int async_w, async_r;
	/*
	 * Completion events (events.c), from the first CQ with a channel on:
	 * the doorbell, a datagram socket pair (peers ring bell[1], which the
	 * agent hands them; the event thread reads bell[0]), and the thread.
	 */
	int bell[2];
	int ep;				/* what the thread sleeps on: the doorbell, cross-host QPs' sockets */
	pthread_t events;
	pid_t events_pid;		/* the process the thread runs in (not a fork child) */
	int events_on, stopping;
};

struct ffv_pd {
	struct ibv_pd ibv_pd;
	uint32_t num;			/* the agent's name for it (PROTOCOL.md, VERBS_QP) */
};

/* A registered region: lkey for local SGEs; remote ones are shared memory (mr.c). */
struct ffv_mr {
	struct verbs_mr vmr;
	struct ffv_mr *next;
	uintptr_t start, end;		/* [addr, addr + length) */
	int access;
	int remote;			/* registered with the agent: its pages are shared */
	/* Its runs of shared pages (mr.c): its own, not whatever is at its addresses when it goes. */
	void *segs[16];
	int nsegs;
};

/* A peer's region mapped here, found by (the peer QP it came through, rkey). */
struct ffv_grant {
	struct ffv_grant *next;
	uint32_t peer_qpn, rkey;
	uint32_t gen;			/* the peer QP's mr_gen word when the agent granted it */
	uintptr_t start, end;		/* the region in the owner's address space */
	uint8_t *base;			/* our mapping of its pages from floor(start) */
	size_t map_len;
	int access;
};

enum { FFV_UNARMED, FFV_ARM_ANY, FFV_ARM_SOLICITED };

struct ffv_cq {
	struct verbs_cq vcq;
	struct ffv_context *ctx;
	struct ibv_wc *wc;		/* ring of size entries: head is next to poll */
	uint32_t size, head, count;
	int overflowed;
	uint32_t events;		/* CQ_ERR events written for it (at its overflow) */
	int chan;			/* our writer of its completion channel's pipe, or -1 */
	int armed;			/* FFV_ARM_*: ibv_req_notify_cq's, until the event */
	uint32_t spins;			/* polls that found nothing: its program spins on it (ffv_qp_look) */
	/*
	 * Its quiet snapshot (cq.c): taken when a poll found its QPs with
	 * nothing to do but look at their rings, valid while ctx->gen is
	 * quiet_gen; the ring counters each QP would look at, as left.
	 */
	uint64_t quiet_gen;
	struct ffv_quiet *quiet;
	uint32_t nquiet, quiet_cap;
};

struct ffv_quiet {
	const uint64_t *prod;		/* the QP's ring's prod ... */
	uint64_t cons;			/* ... as far as it took it */
};

/* A posted receive request: its buffers, copied from the ibv_recv_wr. */
struct ffv_rwqe {
	uint64_t wr_id;
	uint64_t room;			/* the SGEs' bytes */
	int num_sge;
	struct ibv_sge sge[];
};

/* Posted receives, in order: a QP's own (its RQ) or an SRQ's (srq.c). */
struct ffv_rq {
	struct ffv_rwqe **w;		/* ring of size entries: head is the oldest */
	uint32_t head, count, size;
	uint32_t max_sge;
};

/* A shared receive queue: RC QPs made with it take their receives from it (srq.c). */
struct ffv_srq {
	struct ibv_srq ibv_srq;
	struct ffv_context *ctx;
	struct ffv_rq rq;
	uint32_t limit;			/* armed srq_limit, 0 when not armed */
	uint32_t events;		/* SRQ_LIMIT_REACHED events written for it */
	int starved;			/* a QP of it has a message waiting for a receive */
};

/*
 * A send request that waits: behind a SEND that did not fit the peer's
 * ring, in order (post.c). Inline data is copied into data[].
 */
struct ffv_swqe {
	struct ffv_swqe *next;
	struct ibv_send_wr wr;		/* wr.sg_list points at sge; next unused */
	uint32_t total, done;		/* a SEND's bytes, and how many are in the ring */
	struct ibv_sge sge[];
};

/* An address handle: where a UD send goes (ud.c). */
struct ffv_ah {
	struct ibv_ah ibv_ah;
	struct ibv_ah_attr attr;
};

/*
 * A UD lane (ud.c; PROTOCOL.md, "UD lanes"): a ring one sender QP produces
 * datagrams into and one receiver QP consumes, the sender's memfd.
 */
struct ffv_lane {
	struct ffv_lane *next;
	uint8_t *mem;			/* NULL: the receiver was not found (a sender's) */
	uint32_t ring;
	uint64_t pos;			/* the sender's prod, the receiver's cons */
	/* The other end, as VERBS_PEER names it: the receiver's key, the sender's identity. */
	uint8_t peer[24];
	uint32_t id;			/* the agent's lane id (a receiver's) */
	int bell;			/* the receiver's doorbell (a sender's), or -1 */
	int broken;			/* the sender broke the layout: read no more */
	int64_t retry_at;		/* a receiver not found: ask the agent again from then, */
	int64_t backoff;		/* after this long (ns), doubling while it is not found */
	/*
	 * Across hosts (ud.c): the lane is a TCP connection, sock. A sender
	 * writes datagrams as frames (pend: the rest of one the socket took in
	 * part); a receiver reads them into a ring of its own in mem, as a
	 * local sender would produce them, so the rest of the path is one.
	 */
	int sock;
	uint8_t *pend;
	uint32_t pend_len, pend_off;
	uint8_t fhdr[FF_VW_HDR];	/* a receiver's: the frame being read */
	uint32_t fhave, fleft;
	long foff;			/* its record in the ring, -1: none reserved yet */
	uint64_t fprod;			/* the ring's producer count (ours) */
	int watched;			/* in the event thread's epoll set (while the QP's CQ is armed) */
};

struct ffv_qp {
	struct verbs_qp vqp;		/* calloc'd, comp_mask stays 0: no ibv_qp_ex */
	struct ffv_qp *next;
	struct ffv_pd *pd;
	struct ffv_cq *scq, *rcq;
	int sq_sig_all;
	struct ibv_qp_cap cap;
	/* Attributes modify_qp set, as query_qp gives them back. */
	struct ibv_qp_attr attr;
	/* The incoming ring: our memfd, made at create_qp, and again at a reset after RTR (qp.c). */
	int memfd;
	uint8_t *mem;
	uint32_t ring_size;
	int ring_out;			/* an RC QP's: it went to RTR since, so a peer may hold the ring */
	/* The peer: named at RTR, found at the agent at the first need. */
	uint32_t peer_qpn;
	uint8_t *peer_mem;
	uint32_t peer_ring;
	uint64_t tx_prod;		/* bytes we produced into the peer's ring (ours to know) */
	uint64_t peer_cons;		/* its consumer count as we last read it */
	int64_t reach_by, reach_next;	/* ffv_qp_reach: until when, and when next, to ask */
	uint64_t tx_msgs;		/* messages started into the peer's ring (each takes a receive) */
	int64_t rnr_by;			/* waiting for the peer's receive (rnr_retry < 7) until then */
	uint64_t rq_posted;		/* receives ever posted to our own queue (the header's copy) */
	int peer_bell;			/* the peer's doorbell (VERBS_PEER_QP's second fd), or -1 */
	uint32_t waiting;		/* what we last wrote to the peer's waiting word */
	/* Our doorbell went to the agent with the QP: a CQ of ours has a channel. */
	int belled;
	/* Posted receives, in order: its own, or (srq set) its SRQ's. */
	struct ffv_rq rq;
	struct ffv_srq *srq;
	uint64_t rx_cons;		/* bytes consumed from our ring (the peer may scribble on cons) */
	/* The receive a message's first piece was matched to, held until its last. */
	struct ffv_rwqe *rx_wqe;
	int rx_starved;			/* a message's first piece found no receive posted (RNR) */
	uint8_t rx_op;			/* that message's op: every piece must carry it */
	uint32_t rx_off;		/* bytes of it placed in rx_wqe */
	enum ibv_wc_status rx_status;	/* how it ends: LOC_LEN_ERR once it overflows */
	int taking;			/* in ffv_take_incoming */
	int rx_broken;			/* the peer broke the ring's layout: nothing more is taken */
	/* Sends waiting for room, oldest first. */
	struct ffv_swqe *sq, **sq_tail;
	uint32_t sq_count;
	uint32_t events;		/* asynchronous events written for it (LAST_WQE_REACHED) */
	/*
	 * What the event thread saw at its last look (ffv_qp_look). busy: the
	 * program called (posts, polls of the QP's CQs) since, so it moves
	 * its waiting sends itself. spinning: it polls a CQ of the QP and
	 * finds nothing at least once a microsecond or so, so it takes what
	 * arrives itself; polls now and then are no sign of that: perftest's
	 * ib_write_lat polls its send CQ once per message and spins on memory
	 * for the peer's WRITE, which from another host only the thread
	 * applies.
	 */
	uint32_t calls, calls_seen, spins_seen;
	int64_t spins_at;
	int busy, spinning;
	/* A UD QP's lanes (ud.c): to its receivers, from its senders. */
	int tx_pend;			/* a lane to a receiver holds a datagram written in part */
	struct ffv_lane *tx_lanes, *rx_lanes;
	uint32_t lanes_seen;		/* the lanes word when we last asked for lanes */
	uint32_t next_lane;		/* the lane id to ask from */
	/* A peer on another host: the connection to it (wire.c), instead of peer_mem. */
	struct ffv_wire *wire;
};

static inline struct ffv_device *ffv_dev(struct ibv_device *d)
{
	return container_of(d, struct ffv_device, vdev.device);
}

/* libibverbs hands out &vctx.context, the last member of a verbs_context. */
static inline struct ffv_context *ffv_ctx(struct ibv_context *ctx)
{
	return container_of(ctx, struct ffv_context, vctx.context);
}

/*
 * ctx->mu, for anything but ibv_poll_cq: what it changes may be what a
 * CQ's quiet snapshot rests on (a send queued, a QP made, moved or gone),
 * so every snapshot goes stale.
 */
static inline void ffv_lock(struct ffv_context *c)
{
	pthread_mutex_lock(&c->mu);
	c->gen++;
}

static inline struct ffv_qp *ffv_qp(struct ibv_qp *qp)
{
	return container_of(qp, struct ffv_qp, vqp.qp);
}

static inline struct ffv_cq *ffv_cq(struct ibv_cq *cq)
{
	return container_of(cq, struct ffv_cq, vcq.cq);
}

static inline struct ffv_ah *ffv_ah(struct ibv_ah *ah)
{
	return container_of(ah, struct ffv_ah, ibv_ah);
}

static inline struct ffv_pd *ffv_pd(struct ibv_pd *pd)
{
	return container_of(pd, struct ffv_pd, ibv_pd);
}

static inline struct ffv_srq *ffv_srq(struct ibv_srq *srq)
{
	return container_of(srq, struct ffv_srq, ibv_srq);
}

/* ---- agent.c: the provider's session with the agent ---- */

/*
 * One request and its answer, ctx->mu held: msg (encoded by the caller,
 * with fds nfds of them) is sent, the answer decoded into *reply (its
 * bytes in buf) with up to *nrfds fds. Returns 0, -errno, or the agent's
 * ERR_CODE as a positive number (and its ERR_MSG in FREEFLOW_DEBUG).
 */
struct ff_msg;
int ffv_agent_call(struct ffv_context *c, uint8_t *buf, size_t len, const int *fds, int nfds,
		   struct ff_msg *reply, size_t cap, int *rfds, int *nrfds);
void ffv_agent_close(struct ffv_context *c);
uint32_t ffv_next_seq(struct ffv_context *c);
/* FREEFLOW_DEBUG is set: say why on stderr. */
int ffv_debug_on(void);

/* ---- mr.c: PDs, regions, grants ---- */
struct ibv_pd *ffv_alloc_pd(struct ibv_context *ctx);
int ffv_dealloc_pd(struct ibv_pd *pd);
struct ibv_mr *ffv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, int access);
int ffv_dereg_mr(struct verbs_mr *vmr);
/* ctx->mu held: the MR of lkey that holds [addr, addr + len) with access, or NULL. */
struct ffv_mr *ffv_mr_find(struct ffv_context *c, uint32_t lkey, uint64_t addr, uint32_t len,
			   int access);
/*
 * ctx->mu held: where [raddr, raddr + len) of the region rkey, reached
 * through qp's peer, is mapped here, if the region allows access; NULL
 * with *status the work completion's error otherwise.
 */
uint8_t *ffv_grant_find(struct ffv_qp *qp, uint32_t rkey, uint64_t raddr, uint32_t len,
			int access, enum ibv_wc_status *status);
void ffv_grants_drop(struct ffv_context *c);

/* ---- cq.c ---- */
struct ibv_cq *ffv_create_cq(struct ibv_context *ctx, int cqe, struct ibv_comp_channel *ch,
			     int vec);
int ffv_resize_cq(struct ibv_cq *cq, int cqe);
int ffv_destroy_cq(struct ibv_cq *cq);
int ffv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
/*
 * ctx->mu held: add a completion (solicited: a receive of a message sent
 * with IBV_SEND_SOLICITED); 0, or -ENOSPC when the CQ overflowed. An armed
 * CQ's channel gets its event.
 */
int ffv_cq_push(struct ffv_cq *cq, const struct ibv_wc *wc, int solicited);

/* ---- events.c: completion channels and the doorbell ---- */
/* create_cq with a channel: our writer of it, the event thread; 0 or -errno. */
int ffv_cq_channel(struct ffv_context *c, struct ffv_cq *cq, struct ibv_comp_channel *ch);
int ffv_req_notify_cq(struct ibv_cq *cq, int solicited);
/* ctx->mu held: the CQ's event into its channel; disarmed. */
void ffv_cq_fire(struct ffv_cq *cq);
/* free_context: the event thread ends, the doorbell closes. */
/*
 * ctx->mu held: c's doorbell and event thread, if not yet there: for
 * completion channels, and for sends that wait for their peer to connect
 * back (the thread goes on with them while the program does not call).
 */
int ffv_events_start(struct ffv_context *c);
void ffv_events_stop(struct ffv_context *c);
/* Ring a peer's doorbell: never blocks, whatever fd is. */
void ffv_ring(int fd);
/* alloc_context: the pipe of asynchronous events; 0 or -errno. */
int ffv_async_open(struct ffv_context *c);
/* ctx->mu held: an asynchronous event about element (the SRQ or QP type names), for ibv_get_async_event. */
void ffv_async_event(struct ffv_context *c, void *element, enum ibv_event_type type);
/*
 * Destroying element, of which fired events were written: ctx->mu held,
 * ffv_async_forget takes back those not read yet (as a kernel drops them),
 * and says how many, or -ENOMEM; then, ctx->mu released,
 * ffv_async_wait_acked waits until the program acknowledged the others
 * (ibv_ack_async_event counts them in *completed under mu, signals cond).
 */
int ffv_async_forget(struct ffv_context *c, void *element);
void ffv_async_wait_acked(pthread_mutex_t *mu, pthread_cond_t *cond, const uint32_t *completed,
			  uint32_t acked);

/* ---- qp.c ---- */
struct ibv_qp *ffv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
int ffv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
		 struct ibv_qp_init_attr *init);
int ffv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
int ffv_destroy_qp(struct ibv_qp *qp);
/* A QP-layout memfd with a ring of ring bytes, made and mapped; 0 or -errno. */
int ffv_ring_make(uint32_t ring, int *fd, uint8_t **mem);
/* Map a QP-layout memfd another process made, after checking its size and header. */
int ffv_ring_map(int fd, uint8_t **mem, uint32_t *ring);
/*
 * VERBS_PEER for the QP an address (modify_qp's ah_attr, a UD address
 * handle's) and a QPN name, one name per QP: by LID, also when the address
 * is a GID an overlay address makes, ::ffff:a.b.c.d, whose LID is c·256+d
 * (docs/VERBS.md, "Discovery"; a UD lane is found by it); by GID otherwise.
 */
void ffv_peer_name(const struct ibv_ah_attr *ah, uint32_t qpn, uint8_t val[24]);
/* ctx->mu held: map qp's peer's ring (VERBS_CONNECT); 0, or the work completion's error. */
enum ibv_wc_status ffv_qp_connect(struct ffv_qp *qp);
/*
 * ctx->mu held: ffv_qp_connect, as a NIC retries a peer that does not
 * answer: FFV_REACH_LATER while the peer has not connected back and the
 * retry budget lasts (asked again at most every millisecond), then the
 * error; 0 once connected.
 */
#define FFV_REACH_LATER	(-1)
int ffv_qp_reach(struct ffv_qp *qp);
/*
 * ctx->mu held: a request to a peer that is gone (its dead word) waits as
 * a NIC retries a peer that stopped answering, for the same budget:
 * FFV_REACH_LATER, then the retry error. A program that stops polling
 * before then (it counted its own messages done) never sees it.
 */
int ffv_qp_retry_dead(struct ffv_qp *qp);
int64_t ffv_now_ns(void);
/*
 * ctx->mu held: qp to the error state: what already arrived is delivered
 * (a NIC would have), then every request still posted completes flushed.
 */
void ffv_qp_error(struct ffv_qp *qp);

/* ---- srq.c: receive queues, a QP's own and shared ones ---- */
struct ibv_srq *ffv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr);
int ffv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask);
int ffv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr);
int ffv_destroy_srq(struct ibv_srq *srq);
int ffv_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
/* A queue of size receives of up to max_sge SGEs each; 0 or -ENOMEM. */
int ffv_rq_init(struct ffv_rq *q, uint32_t size, uint32_t max_sge);
/*
 * ctx->mu held: wr and the requests chained to it at q's tail: 0, or
 * EINVAL (num_sge past max_sge) or ENOMEM (q full) with *bad the request
 * that failed and those before it posted.
 */
int ffv_rq_post(struct ffv_rq *q, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
/* Drop what q holds, without completions (a QP reset); ffv_rq_free also frees its ring. */
void ffv_rq_clear(struct ffv_rq *q);
void ffv_rq_free(struct ffv_rq *q);
/*
 * ctx->mu held: the next posted receive for qp (from its SRQ if it has
 * one, else its RQ), NULL if none; the caller owns it (frees it). An SRQ
 * whose count drops below its armed limit gets its SRQ_LIMIT_REACHED event.
 */
struct ffv_rwqe *ffv_rq_pop(struct ffv_qp *qp);
/*
 * ctx->mu held: the receive a message arriving at qp now goes into
 * (ffv_rq_pop), or NULL: the message waits, and a receive posted for qp
 * takes it at once (ffv_rq_fed).
 */
struct ffv_rwqe *ffv_rx_next(struct ffv_qp *qp);
/* ctx->mu held: qp's message waits for a receive no longer if one was just posted for it. */
void ffv_rq_fed(struct ffv_qp *qp);
/*
 * Whether every buffer of w lies in an MR of c allowing local writes now,
 * when a message starts into it: the program may have deregistered one
 * since it posted it (a NIC would then fail it, not crash).
 */
int ffv_rwqe_writable(struct ffv_context *c, const struct ffv_rwqe *w);

/* ---- post.c: the data path ---- */
#define FFV_PIECE_MAX(ring)	((ring) / 8)	/* a SEND larger than this goes in pieces */
static inline uint32_t ffv_round16(uint32_t n)
{
	return (n + FF_VQP_REC_ALIGN - 1) & ~(FF_VQP_REC_ALIGN - 1);
}
/* What carrying out a work request came to, or a work completion error as -status. */
enum { FFV_DONE, FFV_WAIT, FFV_SENT /* written; it completes later, in order (wire.c) */ };
int ffv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int ffv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
/*
 * ctx->mu held: move qp's data along: incoming records to receives, waiting
 * sends to the ring (asking the peer for a doorbell when they still wait).
 */
void ffv_progress(struct ffv_qp *qp);
/*
 * ctx->mu held: the event thread's look, on each wake, at whether qp's
 * program still calls (busy, with sends waiting) or spins on its CQs
 * (spinning, with a connection to another host): work a NIC would do on
 * its own that the program does meanwhile; 1 while it does: look again
 * in a millisecond.
 */
int ffv_qp_look(struct ffv_qp *qp);
/*
 * ctx->mu held, on the event thread: qp's connection to a peer on another
 * host has bytes or room: frames applied (SENDs left in our ring for the
 * program's poll, or the thread's when a channel asks), waiting requests
 * and answers written, as a NIC does without its host.
 */
void ffv_wire_serve(struct ffv_qp *qp);
/* ctx->mu held: the records waiting in qp's ring into its posted receives. */
void ffv_take_incoming(struct ffv_qp *qp);
/*
 * Producing into a ring (RC: the peer QP's; UD: a lane): room for a record
 * of len payload bytes, padding to the ring's end first if it would wrap,
 * prod advanced past the padding: the offset to write at, or -1 if none.
 */
long ffv_ring_reserve(uint8_t *mem, uint32_t size, uint64_t *prod, uint32_t len);
/*
 * Where a record of len payload bytes would go in a ring of size bytes
 * whose consumer is at cons: its offset, *prod moved past the pad before
 * it if it wraps (ffv_ring_reserve writes that pad); -1 when there is no
 * room.
 */
long ffv_ring_fit(uint32_t size, uint64_t *prod, uint64_t cons, uint32_t len);
void ffv_rec_header(uint8_t *at, uint32_t len, uint8_t op, uint8_t flags, uint32_t imm,
		    uint32_t total);
/* Records out: prod, then the owner's doorbell if its armed word asks (events.c). */
void ffv_ring_publish(uint8_t *mem, uint64_t prod, int bell);
/* Copy len bytes out of (gather) or into (scatter) SGEs' bytes, from offset off of them. */
void ffv_gather(uint8_t *dst, const struct ibv_sge *sge, int n, uint32_t off, uint32_t len);
void ffv_scatter(const struct ibv_sge *sge, int n, uint32_t off, const uint8_t *src, uint32_t len);
/* ctx->mu held: a finished send request's completion if signaled, or the error that stops the QP (r -status). */
void ffv_finish(struct ffv_qp *qp, const struct ibv_send_wr *wr, uint32_t total, int r);
/* Whether qp found its peer: its ring mapped (same host) or a connection to it (wire.c). */
static inline int ffv_reached(const struct ffv_qp *qp)
{
	return qp->peer_mem || qp->wire;
}
/* ctx->mu held: a completion of qp's into its send or receive CQ. */
void ffv_complete(struct ffv_qp *qp, int send, uint64_t wr_id, enum ibv_wc_status st,
		  enum ibv_wc_opcode op, uint32_t len);

/* ---- ud.c: UD QPs and address handles ---- */
struct ibv_ah *ffv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr);
int ffv_destroy_ah(struct ibv_ah *ah);
/* ctx->mu held: a UD SEND of total bytes: 0 (sent, or dropped as a fabric drops it) or -status. */
int ffv_ud_send(struct ffv_qp *qp, const struct ibv_send_wr *wr, uint32_t total);
/* ctx->mu held: the datagrams waiting in a UD QP's lanes into its posted receives. */
void ffv_ud_take(struct ffv_qp *qp);
/*
 * ctx->mu held, a UD QP becoming ready to receive (RTR): the datagrams that
 * came before, while it was in RESET or INIT or before a reset, dropped
 * from its lanes, as a NIC's QP drops what comes before RTR and what it
 * holds at a reset.
 */
void ffv_ud_drop(struct ffv_qp *qp);
/* ctx->mu held: a UD QP's armed word into each of its lanes (events.c). */
void ffv_ud_arm(struct ffv_qp *qp, uint32_t on);
/* The event thread: whether fd, which woke it, is a connection of one of qp's lanes from another host. */
int ffv_ud_woke(struct ffv_qp *qp, int fd);
/* A UD QP's lanes unmapped (nothing for an RC QP). */
void ffv_ud_free(struct ffv_qp *qp);

/* ---- wire.c: RC peers on other hosts ---- */
/*
 * Frame bytes [*done, FF_VW_HDR + len) on fd, the payload the n SGEs' bytes:
 * 1 once all went, 0 when the socket is full (*done says how far), -errno
 * when the connection failed.
 */
int ffv_frame_write(int fd, const uint8_t *hdr, const struct ibv_sge *sge, int n, uint32_t len,
		    uint32_t *done);
/* A connection to a peer's provider made ready: non-blocking, no delay, keepalives; 0 or -errno. */
int ffv_wire_socket(int fd);
/* Close such a connection, taking what came unread first (so no reset drops what we wrote). */
void ffv_wire_end(int fd);
/* ctx->mu held: qp's peer is across fd, a TCP connection the agent handed (VERBS_PEER_QP host-tcp). */
int ffv_wire_attach(struct ffv_qp *qp, int fd);
/* ctx->mu held: the connection closed and what waits on it dropped, without completions (reset, destroy). */
void ffv_wire_close(struct ffv_qp *qp);
/* ctx->mu held: a work request as a frame to the peer: FFV_DONE, FFV_WAIT, FFV_SENT, or -status. */
int ffv_wire_run(struct ffv_qp *qp, const struct ibv_send_wr *wr, uint32_t total, uint32_t *done);
/* ctx->mu held: keep w, written, until its turn to complete (after the answers before it). */
void ffv_wire_sent(struct ffv_qp *qp, struct ffv_swqe *w);
/*
 * ctx->mu held: the frames that arrived, applied (SENDs into our ring,
 * which ffv_take_incoming then reads: the room the sender counted on).
 */
void ffv_wire_rx(struct ffv_qp *qp);
/* ctx->mu held: our credit and answers written, what the event thread listens for updated. */
void ffv_wire_tx(struct ffv_qp *qp);
/* ctx->mu held: the peer or the link is gone, and what it sent before was read. */
int ffv_wire_dead(const struct ffv_qp *qp);
/*
 * ctx->mu held, at ibv_dereg_mr of [start, end): a WRITE from the peer read
 * in part into it gets no more of its bytes there (refused, as a NIC
 * refuses a request on an invalidated key).
 */
void ffv_wire_forget(struct ffv_qp *qp, uintptr_t start, uintptr_t end);
/* The connection's descriptor (what wakes the event thread for qp). */
int ffv_wire_fd(const struct ffv_qp *qp);
/* ctx->mu held: the event thread's interest in qp's connection, if any, again (after qp->spinning changed). */
void ffv_wire_watch(struct ffv_qp *qp);
/* ctx->mu held: the requests written and not completed, flushed (the QP went to error). */
void ffv_wire_flush(struct ffv_qp *qp);
#endif
