/* SPDX-License-Identifier: MIT */
/*
 * Completion events (docs/VERBS.md, "Completion events"): a CQ made with a
 * channel gets one event, a struct ib_uverbs_comp_event_desc naming it, in
 * the channel's pipe (libfreeflow made it, calls/uverbs.c) when a
 * completion is added after ibv_req_notify_cq armed it; then it is
 * disarmed until the next arm. As the IB spec says, only a completion
 * added after the arm fires it, not one already in the CQ: perftest polls
 * one completion per event and takes an event without one as its next
 * message's, which breaks its ping-pong.
 *
 * A receive completes only when the receiver takes the peer's records from
 * its ring, and a program asleep in ibv_get_cq_event takes nothing. So a
 * context with a channel has a doorbell, a datagram socket pair, and a
 * thread asleep on it; a QP of it tells its peers through the agent
 * (VERBS_QP_CREATE's second fd), and the peer rings after producing into
 * the ring while the QP's `armed` word asks for it, or after consuming
 * while the producer's `waiting` word asks for it (sends that found no
 * room). The thread then moves every QP of the context along, which makes
 * the completions and so the events. A peer that rings for nothing costs
 * a scan. Ringing is a non-blocking send: a full doorbell already holds a
 * wake-up, and a descriptor that is not the peer's doorbell fails it.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rdma/ib_user_verbs.h>

#include "verbs/verbs.h"

void ffv_ring(int fd)
{
	char b = 1;

	send(fd, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/* Whether fd is among the n descriptors that woke the thread. */
static int woke(const struct epoll_event *ev, int n, int fd)
{
	for (int i = 0; i < n; i++)
		if (ev[i].data.fd == fd)
			return 1;
	return 0;
}

/* Whether a connection of qp's lanes from other hosts woke the thread (watched while its CQ is armed). */
static int ud_woke(struct ffv_qp *qp, const struct epoll_event *ev, int n)
{
	for (int i = 0; qp->vqp.qp.qp_type == IBV_QPT_UD && i < n; i++)
		if (ffv_ud_woke(qp, ev[i].data.fd))
			return 1;
	return 0;
}

/*
 * The event thread: asleep on the doorbell and on the connections of QPs
 * whose peers are on other hosts (wire.c), no CPU while idle.
 */
static void *events_main(void *arg)
{
	struct ffv_context *c = arg;
	struct epoll_event ev[32];
	char buf[256];
	int timeout = -1, n, rung;

	for (;;) {
		n = epoll_wait(c->ep, ev, 32, timeout);
		if (n < 0 && errno != EINTR)
			return NULL;
		if (n < 0)
			n = 0;
		/*
		 * Every ring so far is answered by the one scan below: also one
		 * that came after epoll_wait returned for something else, which
		 * this drain takes (epoll will not report it again).
		 */
		rung = 0;
		while (recv(c->bell[0], buf, sizeof(buf), MSG_DONTWAIT) > 0)
			rung = 1;
		ffv_lock(c);
		if (c->stopping) {
			pthread_mutex_unlock(&c->mu);
			return NULL;
		}
		/*
		 * A QP whose peer has not connected back retries as a NIC does,
		 * even while its program sleeps (ffv_qp_reach): woken by the
		 * agent when the peer connects, or by the clock for the next try.
		 * A QP across hosts moves along when its connection has bytes or
		 * room (a passive target's requests are served here).
		 */
		timeout = -1;
		for (struct ffv_qp *qp = c->qps; qp; qp = qp->next) {
			/* Rung while waiting for its peer to connect back: maybe it has. */
			int awaiting = rung && qp->vqp.qp.qp_type == IBV_QPT_RC && !ffv_reached(qp) &&
				       (qp->vqp.qp.state == IBV_QPS_RTR || qp->vqp.qp.state == IBV_QPS_RTS);

			/*
			 * Frames in: applied as a NIC applies them; what a SEND
			 * brings stays in the ring for the program's poll, unless
			 * the program sleeps for it (its receive CQ armed).
			 */
			if (qp->wire && woke(ev, n, ffv_wire_fd(qp))) {
				ffv_wire_serve(qp);
				if (qp->belled && qp->rcq->armed)
					ffv_progress(qp);
			}
			if (ffv_qp_look(qp))
				timeout = 1;
			if (awaiting)
				qp->reach_next = 0;
			if ((rung && (qp->belled || qp->waiting)) || qp->reach_by || qp->rnr_by || awaiting || ud_woke(qp, ev, n))
				ffv_progress(qp);
			if (qp->reach_by || qp->rnr_by)
				timeout = 1;
		}
		pthread_mutex_unlock(&c->mu);
	}
}

/* ctx->mu held: the doorbell and the thread, once per context. */
int ffv_events_start(struct ffv_context *c)
{
	struct epoll_event ev = { .events = EPOLLIN };
	sigset_t all, old;
	int err;

	if (c->events_on)
		return 0;
	if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, c->bell) < 0)
		return -errno;
	c->ep = epoll_create1(EPOLL_CLOEXEC);
	ev.data.fd = c->bell[0];
	if (c->ep < 0 || epoll_ctl(c->ep, EPOLL_CTL_ADD, c->bell[0], &ev) < 0) {
		err = errno;
		goto fail;
	}
	/* The program's signal handlers must never run on the provider's thread. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&c->events, NULL, events_main, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err)
		goto fail;
	c->events_on = 1;
	c->events_pid = getpid();
	return 0;
fail:
	if (c->ep >= 0)
		close(c->ep);
	close(c->bell[0]);
	close(c->bell[1]);
	return -err;
}

void ffv_events_stop(struct ffv_context *c)
{
	if (!c->events_on)
		return;
	/* A fork child has no thread to join (and must not stop its parent's). */
	if (c->events_pid == getpid()) {
		ffv_lock(c);
		c->stopping = 1;
		pthread_mutex_unlock(&c->mu);
		ffv_ring(c->bell[1]);
		pthread_join(c->events, NULL);
	}
	close(c->ep);
	close(c->bell[0]);
	close(c->bell[1]);
	c->events_on = 0;
}

int ffv_cq_channel(struct ffv_context *c, struct ffv_cq *cq, struct ibv_comp_channel *ch)
{
	struct stat st;
	char path[32];
	int err;

	/* Without libfreeflow, ibv_create_comp_channel's "fd" is whatever /dev/null left. */
	if (fstat(ch->fd, &st) < 0 || !S_ISFIFO(st.st_mode)) {
		if (ffv_debug_on())
			fprintf(stderr, "libffv: completion channel fd %d is not libfreeflow's; "
				"channels need libfreeflow.so preloaded, as `freeflow run` does\n", ch->fd);
		return -EOPNOTSUPP;
	}
	/* Our own writer, non-blocking: the program's flags on its fd are its own. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", ch->fd);
	cq->chan = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
	if (cq->chan < 0)
		return -errno;
	ffv_lock(c);
	err = ffv_events_start(c);
	pthread_mutex_unlock(&c->mu);
	if (err) {
		close(cq->chan);
		cq->chan = -1;
	}
	return err;
}

/* ctx->mu held: the armed word of every QP that receives into cq (0 or 1). */
static void arm_qps(struct ffv_cq *cq, uint32_t on)
{
	for (struct ffv_qp *qp = cq->ctx->qps; qp; qp = qp->next)
		if (qp->rcq == cq && qp->belled) {
			__atomic_store_n((uint32_t *)(qp->mem + FF_VQP_OFF_ARMED), on, __ATOMIC_SEQ_CST);
			ffv_ud_arm(qp, on);
		}
}

void ffv_cq_fire(struct ffv_cq *cq)
{
	struct ib_uverbs_comp_event_desc ev = { .cq_handle = (uintptr_t)&cq->vcq.cq };

	cq->armed = FFV_UNARMED;
	arm_qps(cq, 0);
	/*
	 * The pipe holds 8192 events and a CQ has at most one unread per arm:
	 * full, it already holds events the program has not read.
	 */
	if (write(cq->chan, &ev, sizeof(ev)) != sizeof(ev) && ffv_debug_on())
		fprintf(stderr, "libffv: a completion event was not written: %s\n", strerror(errno));
}

/*
 * Arm, then look: the armed words are set (seq_cst) before the rings are
 * read again, and a peer publishes before it reads the word, so either it
 * sees the word and rings, or the look here finds its records
 * (docs/VERBS.md, "No lost wake-up").
 */
int ffv_req_notify_cq(struct ibv_cq *ibcq, int solicited)
{
	struct ffv_cq *cq = ffv_cq(ibcq);
	struct ffv_context *c = cq->ctx;

	if (cq->chan < 0)
		return 0;	/* as a NIC: armed, but no channel to tell */
	ffv_lock(c);
	cq->armed = solicited ? FFV_ARM_SOLICITED : FFV_ARM_ANY;
	arm_qps(cq, 1);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	for (struct ffv_qp *qp = c->qps; qp && cq->armed; qp = qp->next)
		if (qp->scq == cq || qp->rcq == cq)
			ffv_progress(qp);
	pthread_mutex_unlock(&c->mu);
	return 0;
}

/*
 * Asynchronous events (docs/VERBS.md, "Asynchronous events"): libibverbs'
 * ibv_get_async_event reads a struct ib_uverbs_async_event_desc from the
 * context's async_fd, as from a kernel's event file. Ours is the read end of
 * a pipe, blocking as a kernel's is; the provider writes the other end.
 */
int ffv_async_open(struct ffv_context *c)
{
	char path[32];
	int p[2];

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	/* Our own reader, non-blocking (ffv_async_forget); the program's fd stays blocking. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", p[0]);
	c->async_r = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (c->async_r < 0 || fcntl(p[1], F_SETFL, O_NONBLOCK) < 0) {
		int err = -errno;

		if (c->async_r >= 0)
			close(c->async_r);
		close(p[0]);
		close(p[1]);
		return err;
	}
	c->vctx.context.async_fd = p[0];
	c->async_w = p[1];
	return 0;
}

void ffv_async_event(struct ffv_context *c, void *element, enum ibv_event_type type)
{
	struct ib_uverbs_async_event_desc ev = { .element = (uintptr_t)element, .event_type = type };

	/* 16 bytes: atomic in a pipe. Full (4096 unread events), it is dropped. */
	if (write(c->async_w, &ev, sizeof(ev)) != sizeof(ev) && ffv_debug_on())
		fprintf(stderr, "libffv: an asynchronous event was not written: %s\n", strerror(errno));
}

/*
 * Read every event out and write back those of other objects, in order:
 * ctx->mu keeps our writer out meanwhile; a program's read between takes
 * whole events (each 16-byte write and read is atomic) and acknowledges
 * them, which ffv_async_wait_acked then waits for.
 */
int ffv_async_forget(struct ffv_context *c, void *element)
{
	int cap = fcntl(c->async_r, F_GETPIPE_SZ);
	size_t size = cap > 0 ? (size_t)cap : 65536, n = 0, keep = 0;
	struct ib_uverbs_async_event_desc *ev = malloc(size);
	ssize_t r;

	if (!ev)
		return -ENOMEM;
	while (n < size && (r = read(c->async_r, (uint8_t *)ev + n, size - n)) > 0)
		n += (size_t)r;
	n /= sizeof(*ev);
	for (size_t i = 0; i < n; i++)
		if (ev[i].element != (uintptr_t)element)
			ev[keep++] = ev[i];
	if (keep && write(c->async_w, ev, keep * sizeof(*ev)) < 0 && ffv_debug_on())
		fprintf(stderr, "libffv: asynchronous events lost: %s\n", strerror(errno));
	free(ev);
	return (int)(n - keep);
}

void ffv_async_wait_acked(pthread_mutex_t *mu, pthread_cond_t *cond, const uint32_t *completed,
			  uint32_t acked)
{
	pthread_mutex_lock(mu);
	while (*completed != acked)
		pthread_cond_wait(cond, mu);
	pthread_mutex_unlock(mu);
}
