/* SPDX-License-Identifier: MIT */
/*
 * RC peers on other hosts (docs/VERBS.md, "Across hosts"). The agents hand
 * each end of the pair one end of a TCP connection between the hosts
 * (VERBS_PEER_QP with PATH_KIND host-tcp), and the two providers carry out
 * work requests over it as two NICs over a link: the initiator writes each
 * request as a frame in ibv_post_send (FF_VW_*, include/freeflow/
 * verbs_layout.h); the target's provider applies it when it reads it, when
 * its program polls or on its event thread (a passive target makes no
 * verbs call, and a NIC serves one-sided requests without its host's CPU):
 * a SEND goes into the target QP's own ring, as a same-host peer's records,
 * and is matched to receives there; a WRITE goes straight into the region;
 * a READ or an atomic is answered with a frame, and the answers come back
 * in the order of the requests, as on an RC link.
 *
 * A request completes once its frame is written and every request before it
 * has completed (a READ or an atomic once its answer is in). The agents are
 * not on the path; the target checks every request against its own
 * registered regions and its QP's access flags.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "verbs/verbs.h"

#define RXBUF		16384	/* read ahead: small frames cost one recv for many */
#define DIRECT_MIN	4096	/* a payload part this large is read straight where it goes */
#define MAX_ANSWERS	64	/* answers queued before reading more requests (a peer that does not read) */

enum { HALF_NONE, HALF_REQ, HALF_ANSWER, HALF_CREDIT };	/* whose frame is written in part */

#define SEND_FRAME	(FF_VW_HDR + FF_VW_PIECE)	/* a SEND's frames but its last: its done counts in them */

/* An answer to write: a READ's bytes (taken from the region as they go), an atomic's value, a NAK. */
struct ffv_answer {
	struct ffv_answer *next;
	uint8_t hdr[FF_VW_HDR];
	uint32_t rkey;			/* a READ's region, checked again before each write */
	uint64_t raddr;
	uint32_t len, done;		/* payload bytes; frame bytes written */
};

struct ffv_wire {
	int fd;
	int dead;			/* an error or EOF: the peer or the link is gone */
	int rx_end;			/* nothing more to read (what came before the end was read first) */
	uint32_t interest;		/* the event thread's epoll events for fd */
	int in_rx;			/* in ffv_wire_rx (a completion it makes may fail the QP, which reads) */
	/* The frame being read: its header, then left payload bytes. */
	uint8_t hdr[FF_VW_HDR];
	uint32_t have, left, total;
	uint8_t op;
	uint8_t *dst;			/* a WRITE's destination */
	enum ibv_wc_status refuse;	/* the request failed the target's checks: a NAK once read */
	int done_pending;		/* its payload is in: end_frame next */
	/* A SEND's piece arriving: we produce it into our own ring, a record a frame. */
	uint64_t prod;
	long piece;			/* the piece's offset in the ring; -1: none open */
	uint32_t piece_len, piece_have;
	/* Our consumer count as we last told it (CREDIT), and one to tell. */
	uint64_t credited;
	int credit_due;
	uint8_t credit_hdr[FF_VW_HDR];
	uint32_t credit_done;
	/* The peer's ring: its producer count as our frames will leave it, its consumer count as told. */
	uint64_t tx_prod, credit;
	uint8_t buf[RXBUF];
	uint32_t pos, len;		/* buf[pos, len) read and not yet taken */
	int big;			/* the last frame's payload was read in place: read the next header alone */
	/* Requests written, completing in order behind an answer still to come. */
	struct ffv_swqe *inflight, **inflight_tail;
	uint32_t owed;			/* READs and atomics among them, at most the QP's max_rd_atomic */
	/* Answers to write, oldest first. */
	struct ffv_answer *answers, **answers_tail;
	uint32_t nanswers;
	int half;
};

static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void wr64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

static int needs_answer(enum ibv_wr_opcode op)
{
	return op == IBV_WR_RDMA_READ || op == IBV_WR_ATOMIC_CMP_AND_SWP ||
	       op == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

/* READs and atomics a QP keeps out at once: its max_rd_atomic (at least 1, at most the device's 16). */
static uint32_t max_owed(const struct ffv_qp *qp)
{
	uint32_t n = qp->attr.max_rd_atomic;

	return n < 1 ? 1 : n > FFV_MAX_RD_ATOM ? FFV_MAX_RD_ATOM : n;
}

/* Whether a request of the wire's op (a NAK names it) is answered. */
static int needs_answer_op(uint64_t op)
{
	return op == FF_VW_READ || op == FF_VW_CAS || op == FF_VW_FADD;
}

static int is_send(enum ibv_wr_opcode op)
{
	return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM;
}

/* The payload bytes of a SEND's frame that starts done bytes into it (total in all). */
static uint32_t piece_len(uint32_t total, uint32_t done)
{
	uint32_t off = done / SEND_FRAME * FF_VW_PIECE;

	return total - off < FF_VW_PIECE ? total - off : FF_VW_PIECE;
}

/*
 * Whether the frame of wr that starts done bytes into it makes a record in
 * the peer's ring for which the peer has not told us of room: a SEND's
 * piece, a WRITE with immediate's empty record.
 */
static int no_credit(const struct ffv_qp *qp, const struct ibv_send_wr *wr, uint32_t total, uint32_t done)
{
	uint64_t prod = qp->wire->tx_prod;

	if (is_send(wr->opcode) && done % SEND_FRAME == 0)
		return ffv_ring_fit(FF_VW_RING, &prod, qp->wire->credit, piece_len(total, done)) < 0;
	if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM && done == 0)
		return ffv_ring_fit(FF_VW_RING, &prod, qp->wire->credit, 0) < 0;
	return 0;
}

/*
 * Whether request wr, done bytes of it written, waits for the peer rather
 * than for the socket: a fenced one until the READs and atomics before it
 * are answered (IB spec), a READ or atomic while the QP's max_rd_atomic
 * are out (the target holds at most that many answers, so two ends
 * reading each other never both stop reading), a SEND's next piece until
 * the peer's ring has room for it (as a NIC's SEND waits on RNR).
 */
static int held(const struct ffv_qp *qp, const struct ibv_send_wr *wr, uint32_t total, uint32_t done)
{
	uint32_t owed = qp->wire->owed;

	return (done == 0 && ((wr->send_flags & IBV_SEND_FENCE && owed) ||
			      (needs_answer(wr->opcode) && owed >= max_owed(qp)))) ||
	       no_credit(qp, wr, total, done);
}

/* ---- the event thread's interest ---- */

static void set_interest(struct ffv_qp *qp)
{
	struct ffv_context *c = ffv_ctx(qp->vqp.qp.context);
	struct ffv_wire *w = qp->wire;
	uint32_t want = 0;
	struct epoll_event ev;

	/*
	 * Frames in wake the thread unless the program spins on its CQs for them
	 * (a wake per frame beside a polling program cost 7 us a message) and
	 * sleeps for no event.
	 */
	if (!w->rx_end && w->nanswers < MAX_ANSWERS &&
	    (!qp->spinning || qp->rcq->armed || qp->scq->armed))
		want |= EPOLLIN;
	if (!w->dead) {
		/*
		 * Something waits to be written: it waits for the socket (nothing
		 * else stops it). Our requests not while the program spins on its
		 * CQs: its polls write them, and a thread woken beside it at each
		 * room made (on its CPU, under its lock) cost ib_write_bw a third.
		 */
		if (w->half || w->answers || w->credit_due ||
		    (qp->sq && qp->vqp.qp.state == IBV_QPS_RTS && (!qp->spinning || qp->scq->armed) &&
		     !held(qp, &qp->sq->wr, qp->sq->total, qp->sq->done)))
			want |= EPOLLOUT;
	}
	/* A fork child's copy of the context shares its parent's epoll set: hands off. */
	if (want == w->interest || !c->events_on || c->events_pid != getpid())
		return;
	ev = (struct epoll_event){ .events = want, .data.fd = w->fd };
	/* Nothing wanted (a dead link would report HUP for ever): out of the set. */
	if (!want)
		epoll_ctl(c->ep, EPOLL_CTL_DEL, w->fd, NULL);
	else
		epoll_ctl(c->ep, w->interest ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, w->fd, &ev);
	w->interest = want;
}

void ffv_wire_watch(struct ffv_qp *qp)
{
	/* A reset closed it: the event thread's look finds the QP no longer spinning after. */
	if (qp->wire)
		set_interest(qp);
}

int ffv_wire_socket(int fd)
{
	int one = 1, idle = 1, cnt = 5;

	/*
	 * Frames go at once; an idle link to a host that vanished without a
	 * reset is noticed in seconds (keepalives). No TCP_USER_TIMEOUT: it
	 * would also end a link whose receiving process is stopped a while
	 * (a debugger, SIGSTOP), which a NIC's link survives.
	 */
	if (fcntl(fd, F_SETFL, O_NONBLOCK) < 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	return 0;
}

int ffv_wire_attach(struct ffv_qp *qp, int fd)
{
	struct ffv_context *c = ffv_ctx(qp->vqp.qp.context);
	struct ffv_wire *w;
	int err;

	/* A NIC serves a passive target without its program: so does the event thread. */
	if ((err = ffv_events_start(c)))
		return err;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->fd = fd;
	w->piece = -1;
	w->inflight_tail = &w->inflight;
	w->answers_tail = &w->answers;
	if ((err = ffv_wire_socket(fd))) {
		free(w);
		return err;
	}
	qp->wire = w;
	set_interest(qp);
	return 0;
}

/* The answers not written yet dropped: the peer is gone, or the connection closes. */
static void drop_answers(struct ffv_wire *w)
{
	while (w->answers) {
		struct ffv_answer *a = w->answers;

		w->answers = a->next;
		free(a);
	}
	w->answers_tail = &w->answers;
	w->nanswers = 0;
	w->credit_due = 0;
	if (w->half == HALF_ANSWER || w->half == HALF_CREDIT)
		w->half = HALF_NONE;
}

void ffv_wire_end(int fd)
{
	char buf[4096];

	/*
	 * What the peer sent and we never read, taken first: closing a socket
	 * with unread bytes resets the connection, which drops what we wrote
	 * and it has not read yet (requests we completed).
	 */
	shutdown(fd, SHUT_WR);
	while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
		;
	close(fd);
}

void ffv_wire_close(struct ffv_qp *qp)
{
	struct ffv_context *c = ffv_ctx(qp->vqp.qp.context);
	struct ffv_wire *w = qp->wire;

	if (!w)
		return;
	if (w->interest && c->events_on && c->events_pid == getpid())
		epoll_ctl(c->ep, EPOLL_CTL_DEL, w->fd, NULL);
	ffv_wire_end(w->fd);
	while (w->inflight) {
		struct ffv_swqe *s = w->inflight;

		w->inflight = s->next;
		free(s);
	}
	drop_answers(w);
	free(w);
	qp->wire = NULL;
}

int ffv_wire_dead(const struct ffv_qp *qp)
{
	return qp->wire->dead && qp->wire->rx_end;
}

void ffv_wire_forget(struct ffv_qp *qp, uintptr_t start, uintptr_t end)
{
	struct ffv_wire *w = qp->wire;

	/* A WRITE read in part into the region: the rest lands nowhere, and it is refused. */
	if (w && w->have == FF_VW_HDR && w->left && w->dst && !w->refuse &&
	    (uintptr_t)w->dst < end && (uintptr_t)w->dst + w->total > start) {
		w->refuse = IBV_WC_REM_ACCESS_ERR;
		w->dst = NULL;
	}
}

int ffv_wire_fd(const struct ffv_qp *qp)
{
	return qp->wire->fd;
}

/*
 * The peer or the link is gone: nothing more is written (the answers owed
 * to it are dropped), and what it sent before is read to the end, however
 * many answers that asks for.
 */
static void gone(struct ffv_qp *qp)
{
	qp->wire->dead = 1;
	drop_answers(qp->wire);
	set_interest(qp);
}

/* Read to the end: gone, and nothing more to read. */
static void ended(struct ffv_qp *qp)
{
	qp->wire->rx_end = 1;
	gone(qp);
}

/* ---- writing ---- */

int ffv_frame_write(int fd, const uint8_t *hdr, const struct ibv_sge *sge, int n, uint32_t len,
		    uint32_t *done)
{
	struct iovec iov[1 + FFV_MAX_SGE];
	struct msghdr mh = { .msg_iov = iov };
	ssize_t r;

	while (*done < FF_VW_HDR + len) {
		uint32_t off = *done;
		int k = 0;

		if (off < FF_VW_HDR)
			iov[k++] = (struct iovec){ (void *)(hdr + off), FF_VW_HDR - off };
		off = off > FF_VW_HDR ? off - FF_VW_HDR : 0;
		for (int i = 0; i < n; i++) {
			if (off >= sge[i].length) {
				off -= sge[i].length;
				continue;
			}
			iov[k++] = (struct iovec){ (uint8_t *)(uintptr_t)sge[i].addr + off, sge[i].length - off };
			off = 0;
		}
		mh.msg_iovlen = k;
		r = sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno == EAGAIN ? 0 : -errno;
		*done += (uint32_t)r;
	}
	return 1;
}

/* ffv_frame_write on qp's connection: 1 when all went, 0 when the socket is full (or it failed: gone). */
static int put(struct ffv_qp *qp, const uint8_t *hdr, const struct ibv_sge *sge, int n,
	       uint32_t len, uint32_t *done)
{
	int r = ffv_frame_write(qp->wire->fd, hdr, sge, n, len, done);

	if (r < 0)
		gone(qp);
	return r > 0;
}

/*
 * Tell the peer of the room we made, once we consumed a quarter of the
 * ring since we last told: a sender that waits for room has more than
 * half of it outstanding, so consuming what it sent always tells it.
 * 1 once nothing is left to tell.
 */
static int put_credit(struct ffv_qp *qp)
{
	struct ffv_wire *w = qp->wire;

	if (!w->credit_due && qp->rx_cons - w->credited >= FF_VW_RING / 4)
		w->credit_due = 1;
	if (!w->credit_due || w->dead)
		return 1;
	if (w->half == HALF_NONE) {
		memset(w->credit_hdr, 0, sizeof(w->credit_hdr));
		w->credit_hdr[FF_VW_OP] = FF_VW_CREDIT;
		wr64(w->credit_hdr + FF_VW_ARG1, qp->rx_cons);
		w->credit_done = 0;
		w->half = HALF_CREDIT;
	}
	if (w->half != HALF_CREDIT || !put(qp, w->credit_hdr, NULL, 0, 0, &w->credit_done))
		return 0;
	w->half = HALF_NONE;
	w->credit_due = 0;
	w->credited = rd64(w->credit_hdr + FF_VW_ARG1);
	return 1;
}

/* Write our credit and the answers that wait, oldest first, as far as the socket takes them. */
static void put_answers(struct ffv_qp *qp)
{
	struct ffv_context *c = ffv_ctx(qp->vqp.qp.context);
	struct ffv_wire *w = qp->wire;

	/* A frame written in part goes on first: an answer's, before our credit. */
	if (w->half != HALF_ANSWER && !put_credit(qp))
		return;
	while (w->answers && w->half != HALF_REQ && !w->dead) {
		struct ffv_answer *a = w->answers;
		struct ibv_sge sge = { 0 };
		int n = 0;

		if (a->hdr[FF_VW_OP] == FF_VW_READ_RESP && a->len) {
			/* The region may have gone since the READ came: a NIC would fail the link. */
			struct ffv_mr *mr = NULL;

			for (struct ffv_mr *m = c->mrs; m; m = m->next)
				if (m->remote && m->vmr.ibv_mr.rkey == a->rkey && a->raddr >= m->start &&
				    a->raddr + a->len <= m->end)
					mr = m;
			if (!mr) {
				shutdown(w->fd, SHUT_RDWR);
				ended(qp);
				return;
			}
			sge = (struct ibv_sge){ .addr = a->raddr, .length = a->len };
			n = 1;
		}
		w->half = HALF_ANSWER;
		if (!put(qp, a->hdr, &sge, n, a->len, &a->done))
			return;
		w->half = HALF_NONE;
		w->answers = a->next;
		if (!w->answers)
			w->answers_tail = &w->answers;
		w->nanswers--;
		free(a);
	}
	if (w->half == HALF_NONE)
		put_credit(qp);
}

void ffv_wire_tx(struct ffv_qp *qp)
{
	if (!qp->wire)
		return;
	put_answers(qp);
	set_interest(qp);
}

/* The part [off, off + len) of the n buffers at sge, as buffers at out: how many. */
static int slice(const struct ibv_sge *sge, int n, uint32_t off, uint32_t len, struct ibv_sge *out)
{
	int k = 0;

	for (int i = 0; i < n && len; i++) {
		uint32_t take;

		if (off >= sge[i].length) {
			off -= sge[i].length;
			continue;
		}
		take = sge[i].length - off < len ? sge[i].length - off : len;
		out[k++] = (struct ibv_sge){ .addr = sge[i].addr + off, .length = take, .lkey = sge[i].lkey };
		len -= take;
		off = 0;
	}
	return k;
}

static uint8_t wire_op(enum ibv_wr_opcode op)
{
	switch (op) {
	case IBV_WR_SEND_WITH_IMM: return FF_VW_SEND_IMM;
	case IBV_WR_RDMA_WRITE: return FF_VW_WRITE;
	case IBV_WR_RDMA_WRITE_WITH_IMM: return FF_VW_WRITE_IMM;
	case IBV_WR_RDMA_READ: return FF_VW_READ;
	case IBV_WR_ATOMIC_CMP_AND_SWP: return FF_VW_CAS;
	case IBV_WR_ATOMIC_FETCH_AND_ADD: return FF_VW_FADD;
	default: return FF_VW_SEND;
	}
}

int ffv_wire_run(struct ffv_qp *qp, const struct ibv_send_wr *wr, uint32_t total, uint32_t *done)
{
	struct ffv_wire *w = qp->wire;
	uint8_t op = wire_op(wr->opcode);
	int send = is_send(wr->opcode), data = send || op == FF_VW_WRITE || op == FF_VW_WRITE_IMM;

	if (wr->opcode > IBV_WR_ATOMIC_FETCH_AND_ADD)
		return -(int)IBV_WC_REM_INV_REQ_ERR;	/* what the device does not offer (docs/VERBS.md) */
	if ((op == FF_VW_CAS || op == FF_VW_FADD) && (total != 8 || wr->wr.atomic.remote_addr % 8))
		return -(int)IBV_WC_REM_INV_REQ_ERR;
	for (;;) {
		/* A SEND goes in pieces, a frame each (FF_VW_PIECE); anything else in one frame. */
		uint32_t base = send ? *done - *done % SEND_FRAME : 0, within = *done - base;
		uint32_t off = send ? base / SEND_FRAME * FF_VW_PIECE : 0;
		uint32_t len = send ? piece_len(total, *done) : data ? total : 0;
		uint8_t hdr[FF_VW_HDR] = { 0 };
		struct ibv_sge part[FFV_MAX_SGE];
		uint64_t prod;

		/* Our credit and the peer's answers go whole between our frames, and ours whole between them. */
		put_answers(qp);
		if ((w->half != HALF_NONE && w->half != HALF_REQ) || w->dead ||
		    (within == 0 && (w->answers || w->credit_due))) {
			set_interest(qp);
			return FFV_WAIT;
		}
		if (held(qp, wr, total, *done))
			return FFV_WAIT;
		hdr[FF_VW_OP] = op;
		wr32(hdr + FF_VW_LEN, len);
		wr32(hdr + FF_VW_IMM, wr->imm_data);
		if (send) {
			hdr[FF_VW_FLAGS] = (off == 0 ? FF_VQP_FIRST : 0) |
					   (off + len == total ? FF_VQP_LAST : 0) |
					   (off + len == total && wr->send_flags & IBV_SEND_SOLICITED ?
					    FF_VQP_SOLICITED : 0);
			wr64(hdr + FF_VW_ARG1, total);
		} else if (op == FF_VW_CAS || op == FF_VW_FADD) {
			wr32(hdr + FF_VW_RKEY, wr->wr.atomic.rkey);
			wr64(hdr + FF_VW_RADDR, wr->wr.atomic.remote_addr);
			wr64(hdr + FF_VW_ARG1, wr->wr.atomic.compare_add);
			wr64(hdr + FF_VW_ARG2, wr->wr.atomic.swap);
		} else {
			wr32(hdr + FF_VW_RKEY, wr->wr.rdma.rkey);
			wr64(hdr + FF_VW_RADDR, wr->wr.rdma.remote_addr);
			wr64(hdr + FF_VW_ARG1, total);
		}
		/* Its record in the peer's ring, counted as the peer will make it (once: not again if none of it went). */
		prod = w->tx_prod;
		if (within == 0 && (send || op == FF_VW_WRITE_IMM)) {
			ffv_ring_fit(FF_VW_RING, &w->tx_prod, w->credit, send ? len : 0);
			w->tx_prod += FF_VQP_REC_HDR + ffv_round16(send ? len : 0);
		}
		w->half = HALF_REQ;
		if (!put(qp, hdr, part, data ? slice(wr->sg_list, wr->num_sge, off, len, part) : 0, len, &within)) {
			/* Not begun: nothing is counted, and answers and credits may go first. */
			if (within == 0) {
				w->tx_prod = prod;
				w->half = HALF_NONE;
			}
			*done = base + within;
			set_interest(qp);
			return FFV_WAIT;
		}
		*done = base + within;
		w->half = HALF_NONE;
		if (!send || off + len == total)
			break;
	}
	return needs_answer(wr->opcode) || w->inflight ? FFV_SENT : FFV_DONE;
}

void ffv_wire_sent(struct ffv_qp *qp, struct ffv_swqe *s)
{
	struct ffv_wire *w = qp->wire;

	w->owed += needs_answer(s->wr.opcode);
	s->next = NULL;
	*w->inflight_tail = s;
	w->inflight_tail = &s->next;
}

/*
 * The oldest request written completes with r (FFV_DONE or -status), then
 * those behind it that wait for no answer.
 */
static void complete_inflight(struct ffv_qp *qp, int r)
{
	struct ffv_wire *w = qp->wire;

	while (w->inflight) {
		struct ffv_swqe *s = w->inflight;

		w->inflight = s->next;
		if (!w->inflight)
			w->inflight_tail = &w->inflight;
		qp->sq_count--;
		w->owed -= needs_answer(s->wr.opcode);
		ffv_finish(qp, &s->wr, s->total, r);
		free(s);
		if (r != FFV_DONE || !qp->wire)
			return;	/* the QP went to error: ffv_wire_flush took the rest */
		if (w->inflight && needs_answer(w->inflight->wr.opcode))
			return;
	}
}

void ffv_wire_flush(struct ffv_qp *qp)
{
	struct ffv_wire *w = qp->wire;

	if (!w)
		return;
	while (w->inflight) {
		struct ffv_swqe *s = w->inflight;

		w->inflight = s->next;
		qp->sq_count--;
		ffv_complete(qp, 1, s->wr.wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND, 0);
		free(s);
	}
	w->inflight_tail = &w->inflight;
	w->owed = 0;
	/*
	 * Nothing more is read or written; the peer notices (EOF), as a NIC's
	 * peer notices a QP in error by its retries running out.
	 */
	shutdown(w->fd, SHUT_RDWR);
	ended(qp);
}

/* ---- reading ---- */

/* The target's checks of a one-sided request: where it lands, or the status that refuses it. */
static enum ibv_wc_status check_remote(struct ffv_qp *qp, uint32_t rkey, uint64_t raddr,
				       uint64_t len, int access, uint8_t **at)
{
	struct ffv_context *c = ffv_ctx(qp->vqp.qp.context);

	*at = NULL;
	if (!len)
		return IBV_WC_SUCCESS;	/* IB: a zero-length request's R_Key is not checked */
	if ((qp->attr.qp_access_flags & (unsigned int)access) != (unsigned int)access)
		return IBV_WC_REM_ACCESS_ERR;
	for (struct ffv_mr *mr = c->mrs; mr; mr = mr->next)
		if (mr->remote && mr->vmr.ibv_mr.rkey == rkey) {
			if (mr->vmr.ibv_mr.pd != qp->vqp.qp.pd || (mr->access & access) != access ||
			    raddr < mr->start || raddr + len > mr->end || raddr + len < raddr)
				return IBV_WC_REM_ACCESS_ERR;
			*at = (uint8_t *)(uintptr_t)raddr;
			return IBV_WC_SUCCESS;
		}
	return IBV_WC_REM_ACCESS_ERR;
}

/* Queue an answer; its header's op, arg1, arg2. */
static struct ffv_answer *answer(struct ffv_qp *qp, uint8_t op, uint64_t a1, uint64_t a2)
{
	struct ffv_wire *w = qp->wire;
	struct ffv_answer *a;

	if (w->dead)
		return NULL;	/* nobody to answer */
	a = calloc(1, sizeof(*a));
	if (!a) {
		shutdown(w->fd, SHUT_RDWR);	/* an answer lost would shift every later one */
		ended(qp);
		return NULL;
	}
	a->hdr[FF_VW_OP] = op;
	wr64(a->hdr + FF_VW_ARG1, a1);
	wr64(a->hdr + FF_VW_ARG2, a2);
	*w->answers_tail = a;
	w->answers_tail = &a->next;
	w->nanswers++;
	return a;
}

/* The peer broke the protocol: the QP fails, as on a frame a NIC cannot parse. */
static void broken(struct ffv_qp *qp)
{
	shutdown(qp->wire->fd, SHUT_RDWR);
	ended(qp);
	if (qp->vqp.qp.state != IBV_QPS_ERR)
		ffv_qp_error(qp);
}

/* A SEND's piece: its record in our ring; -1 when there is no room. */
static int open_piece(struct ffv_qp *qp)
{
	struct ffv_wire *w = qp->wire;
	long off = ffv_ring_reserve(qp->mem, qp->ring_size, &w->prod, w->left);

	if (off < 0)
		return -1;
	w->piece = off;
	w->piece_len = w->left;
	w->piece_have = 0;
	return 0;
}

/* A header read: check it, and say where its payload goes. */
static void start_frame(struct ffv_qp *qp)
{
	struct ffv_wire *w = qp->wire;
	const uint8_t *h = w->hdr;
	uint32_t len = rd32(h + FF_VW_LEN);
	uint64_t raddr = rd64(h + FF_VW_RADDR);
	struct ffv_swqe *head = w->inflight;

	w->op = h[FF_VW_OP];
	w->left = w->total = len;
	w->big = len >= RXBUF;
	w->refuse = IBV_WC_SUCCESS;
	w->dst = NULL;
	switch (w->op) {
	case FF_VW_SEND:
	case FF_VW_SEND_IMM:
		/* A piece, its record reserved now: room the peer was told of, or it broke the protocol. */
		if (len <= FF_VW_PIECE && rd64(h + FF_VW_ARG1) <= UINT32_MAX &&
		    !(h[FF_VW_FLAGS] & ~(FF_VQP_FIRST | FF_VQP_LAST | FF_VQP_SOLICITED)) && open_piece(qp) == 0)
			return;
		break;
	case FF_VW_WRITE:
	case FF_VW_WRITE_IMM:
		w->refuse = check_remote(qp, rd32(h + FF_VW_RKEY), raddr, len, IBV_ACCESS_REMOTE_WRITE, &w->dst);
		return;
	case FF_VW_READ:
	case FF_VW_CAS:
	case FF_VW_FADD:
		if (!len)
			return;
		break;
	case FF_VW_READ_RESP:
		if (head && head->wr.opcode == IBV_WR_RDMA_READ && len == head->total)
			return;
		break;
	case FF_VW_ATOMIC_RESP:
		if (!len && head && needs_answer(head->wr.opcode))
			return;
		break;
	case FF_VW_NAK:
	case FF_VW_CREDIT:
		if (!len)
			return;
		break;
	}
	broken(qp);
}

/* The piece is in: its record, published to our own reader (ffv_take_incoming), marked as the frame was. */
static void close_piece(struct ffv_qp *qp)
{
	struct ffv_wire *w = qp->wire;

	ffv_rec_header(qp->mem + FF_VQP_HDR_SIZE + w->piece, w->piece_len,
		       w->op == FF_VW_SEND_IMM ? FF_VQP_OP_SEND_IMM : FF_VQP_OP_SEND, w->hdr[FF_VW_FLAGS],
		       rd32(w->hdr + FF_VW_IMM), (uint32_t)rd64(w->hdr + FF_VW_ARG1));
	w->prod += FF_VQP_REC_HDR + ffv_round16(w->piece_len);
	ffv_ring_publish(qp->mem, w->prod, -1);
	w->piece = -1;
}

/* The frame's payload is in: what ends it. */
static void end_frame(struct ffv_qp *qp)
{
	struct ffv_wire *w = qp->wire;
	const uint8_t *h = w->hdr;
	uint64_t raddr = rd64(h + FF_VW_RADDR), a1 = rd64(h + FF_VW_ARG1);
	uint32_t rkey = rd32(h + FF_VW_RKEY);
	uint8_t *at = NULL;
	enum ibv_wc_status st;
	long off;

	switch (w->op) {
	case FF_VW_SEND:
	case FF_VW_SEND_IMM:
		close_piece(qp);
		return;
	case FF_VW_WRITE_IMM:
		/* Its record, where the sender counted it: refused, a pad there (the NAK says why). */
		if ((off = ffv_ring_reserve(qp->mem, qp->ring_size, &w->prod, 0)) < 0) {
			broken(qp);
			return;
		}
		ffv_rec_header(qp->mem + FF_VQP_HDR_SIZE + off, 0,
			       w->refuse ? FF_VQP_OP_PAD : FF_VQP_OP_WRITE_IMM,
			       w->refuse ? 0 : FF_VQP_FIRST | FF_VQP_LAST | (h[FF_VW_FLAGS] & FF_VQP_SOLICITED),
			       rd32(h + FF_VW_IMM), w->total);
		w->prod += FF_VQP_REC_HDR;
		ffv_ring_publish(qp->mem, w->prod, -1);
		if (w->refuse)
			break;
		return;
	case FF_VW_READ:
		st = check_remote(qp, rkey, raddr, a1, IBV_ACCESS_REMOTE_READ, &at);
		if (st) {
			w->refuse = st;
			break;
		}
		if (a1 > 1u << 31) {
			w->refuse = IBV_WC_REM_INV_REQ_ERR;
			break;
		}
		{
			struct ffv_answer *a = answer(qp, FF_VW_READ_RESP, 0, 0);

			if (a) {
				wr32(a->hdr + FF_VW_LEN, (uint32_t)a1);
				a->len = (uint32_t)a1;
				a->rkey = rkey;
				a->raddr = raddr;
			}
		}
		return;
	case FF_VW_CAS:
	case FF_VW_FADD: {
		uint64_t *dst, old;

		if (raddr % 8) {
			w->refuse = IBV_WC_REM_INV_REQ_ERR;
			break;
		}
		st = check_remote(qp, rkey, raddr, 8, IBV_ACCESS_REMOTE_ATOMIC, &at);
		if (st) {
			w->refuse = st;
			break;
		}
		dst = (uint64_t *)at;
		if (w->op == FF_VW_FADD) {
			old = __atomic_fetch_add(dst, a1, __ATOMIC_SEQ_CST);
		} else {
			old = a1;
			__atomic_compare_exchange_n(dst, &old, rd64(h + FF_VW_ARG2), 0, __ATOMIC_SEQ_CST,
						    __ATOMIC_SEQ_CST);
		}
		answer(qp, FF_VW_ATOMIC_RESP, old, 0);
		return;
	}
	case FF_VW_READ_RESP:
		complete_inflight(qp, FFV_DONE);
		return;
	case FF_VW_ATOMIC_RESP:
		ffv_scatter(w->inflight->wr.sg_list, w->inflight->wr.num_sge, 0, h + FF_VW_ARG1, 8);
		complete_inflight(qp, FFV_DONE);
		return;
	case FF_VW_CREDIT:
		/* Room in the peer's ring: never less than told before, nor more than we filled. */
		if (a1 < w->credit || a1 > w->tx_prod)
			broken(qp);
		else
			w->credit = a1;
		return;
	case FF_VW_NAK:
		/*
		 * A refused request fails the QP. A READ's or an atomic's is the
		 * oldest written; a WRITE completed when it was written (no
		 * acknowledgement comes back), so an asynchronous event says it,
		 * and the oldest request still open takes the error.
		 */
		st = a1 > 0 && a1 <= IBV_WC_TM_RNDV_INCOMPLETE ? (enum ibv_wc_status)a1 : IBV_WC_REM_OP_ERR;
		if (!needs_answer_op(rd64(h + FF_VW_ARG2))) {
			ffv_async_event(ffv_ctx(qp->vqp.qp.context), &qp->vqp.qp, IBV_EVENT_QP_ACCESS_ERR);
			qp->events++;
		}
		if (w->inflight)
			complete_inflight(qp, -(int)st);
		else
			ffv_qp_error(qp);
		return;
	}
	if (w->refuse)
		answer(qp, FF_VW_NAK, w->refuse, w->op);
}

/* Payload bytes src[0, n) of the frame: how many were taken. */
static uint32_t take_payload(struct ffv_qp *qp, const uint8_t *src, uint32_t n)
{
	struct ffv_wire *w = qp->wire;
	uint32_t took = 0;

	if (n > w->left)
		n = w->left;
	while (took < n) {
		uint32_t k = n - took, at = w->total - w->left;

		switch (w->op) {
		case FF_VW_SEND:
		case FF_VW_SEND_IMM:
			memcpy(qp->mem + FF_VQP_HDR_SIZE + w->piece + FF_VQP_REC_HDR + w->piece_have,
			       src + took, k);
			w->piece_have += k;
			break;
		case FF_VW_WRITE:
		case FF_VW_WRITE_IMM:
			if (!w->refuse)
				memcpy(w->dst + at, src + took, k);
			break;
		case FF_VW_READ_RESP:
			ffv_scatter(w->inflight->wr.sg_list, w->inflight->wr.num_sge, at, src + took, k);
			break;
		}
		w->left -= k;
		took += k;
	}
	return took;
}

/*
 * Where the next payload bytes can be read straight to, and how many:
 * a WRITE's region, a SEND's open piece; 0 when they go through buf.
 */
static uint32_t direct(struct ffv_qp *qp, uint8_t **to)
{
	struct ffv_wire *w = qp->wire;
	uint32_t n = 0;

	if (w->have < FF_VW_HDR || w->left < DIRECT_MIN)
		return 0;
	if ((w->op == FF_VW_WRITE || w->op == FF_VW_WRITE_IMM) && !w->refuse) {
		*to = w->dst + (w->total - w->left);
		n = w->left;
	} else if (w->op == FF_VW_SEND || w->op == FF_VW_SEND_IMM) {
		*to = qp->mem + FF_VQP_HDR_SIZE + w->piece + FF_VQP_REC_HDR + w->piece_have;
		n = w->piece_len - w->piece_have;
	}
	return n >= DIRECT_MIN ? n : 0;
}

/* Take what buf holds into frames. */
static void parse(struct ffv_qp *qp)
{
	struct ffv_wire *w = qp->wire;

	while (!w->rx_end && qp->vqp.qp.state != IBV_QPS_ERR) {
		if (w->done_pending) {
			end_frame(qp);
			w->done_pending = 0;
			w->have = 0;
			continue;
		}
		if (w->have < FF_VW_HDR) {
			uint32_t k = FF_VW_HDR - w->have;

			if (w->pos == w->len)
				return;
			if (k > w->len - w->pos)
				k = w->len - w->pos;
			memcpy(w->hdr + w->have, w->buf + w->pos, k);
			w->have += k;
			w->pos += k;
			if (w->have == FF_VW_HDR)
				start_frame(qp);
			continue;
		}
		if (w->left) {
			if (w->pos == w->len)
				return;
			w->pos += take_payload(qp, w->buf + w->pos, w->len - w->pos);
			if (w->left)
				continue;
		}
		w->done_pending = 1;
	}
}

void ffv_wire_rx(struct ffv_qp *qp)
{
	struct ffv_wire *w = qp->wire;
	int drained = 0;

	if (w->in_rx)
		return;
	w->in_rx = 1;
	while (!w->rx_end && qp->vqp.qp.state != IBV_QPS_ERR && w->nanswers < MAX_ANSWERS) {
		uint8_t *to;
		uint32_t n, want;
		ssize_t r;

		parse(qp);
		/*
		 * A read that got less than it asked for emptied the socket: no
		 * read again only to hear EAGAIN (one per frame, a receiver that
		 * keeps up found); what comes next wakes the thread's epoll, or
		 * the program polls again.
		 */
		if (drained || w->rx_end || qp->vqp.qp.state == IBV_QPS_ERR)
			break;
		/* buf is empty here: read the next bytes straight where they go, or into buf. */
		n = direct(qp, &to);
		w->pos = w->len = 0;
		if (n) {
			/* The frame's end, and the next frame's header with it into buf. */
			struct iovec iov[2] = { { to, n }, { w->buf, FF_VW_HDR } };
			struct msghdr mh = { .msg_iov = iov, .msg_iovlen = n == w->left ? 2 : 1 };

			want = n + (n == w->left ? FF_VW_HDR : 0);
			r = recvmsg(w->fd, &mh, MSG_DONTWAIT);
		} else {
			/*
			 * After a large frame, likely another: its header alone, so
			 * its payload is read in place, not copied out of buf.
			 */
			want = w->big && w->have == 0 ? FF_VW_HDR : RXBUF;
			r = recv(w->fd, w->buf, want, MSG_DONTWAIT);
		}
		drained = r > 0 && (uint32_t)r < want;
		if (n && r > (ssize_t)n) {	/* the next frame's header came along, into buf */
			w->len = (uint32_t)(r - n);
			r = n;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			break;
		if (r <= 0) {
			ended(qp);
			break;
		}
		if (!n) {
			w->len = (uint32_t)r;
			continue;
		}
		w->left -= (uint32_t)r;
		if (w->op == FF_VW_SEND || w->op == FF_VW_SEND_IMM)
			w->piece_have += (uint32_t)r;
		if (!w->left)
			w->done_pending = 1;
	}
	/* Ended with answers owed: they never come, as a NIC's retries run out. */
	if (w->rx_end && w->inflight && qp->vqp.qp.state != IBV_QPS_ERR)
		complete_inflight(qp, -(int)IBV_WC_RETRY_EXC_ERR);
	put_answers(qp);
	set_interest(qp);
	w->in_rx = 0;
}
