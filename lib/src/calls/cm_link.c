/* SPDX-License-Identifier: MIT */
/*
 * rdma_cm's TCP connections (calls/rdmacm.h): an id's socket, the CM's
 * messages on it, and the thread that serves every id's socket.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "calls/rdmacm.h"

void cm_wake_thread(void)
{
	if (ff_cm.wake[1] >= 0)
		(void)!ff_real.write(ff_cm.wake[1], "w", 1);
}

void cm_close_sock(struct cm_id *id)
{
	if (id->sock >= 0) {
		ff_real.close(id->sock);
		id->sock = -1;
		cm_wake_thread();
	}
}

static void *cm_thread(void *arg);

int cm_start_thread(void)
{
	if (ff_cm.thread_on)
		return 0;
	if (pipe2(ff_cm.wake, O_NONBLOCK | O_CLOEXEC))
		return -errno;
	if (!ff_start_quiet_thread(cm_thread)) {
		ff_real.close(ff_cm.wake[0]);
		ff_real.close(ff_cm.wake[1]);
		ff_cm.wake[0] = ff_cm.wake[1] = -1;
		return -EAGAIN;
	}
	ff_cm.thread_on = 1;
	return 0;
}

socklen_t cm_sa_len(const void *sa)
{
	return ((const struct sockaddr *)sa)->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
								  : sizeof(struct sockaddr_in);
}

int cm_family_ok(const void *sa)
{
	sa_family_t f = ((const struct sockaddr *)sa)->sa_family;

	return f == AF_INET || f == AF_INET6;
}

/* id gets a TCP socket bound to addr (port 0: one the kernel picks), as BIND_IP reserves it. */
int cm_bind_id(struct cm_id *id, const struct sockaddr_in6 *addr)
{
	socklen_t len = sizeof(id->src);
	int one = 1, s;

	if (id->state != S_IDLE)
		return -EINVAL;
	if (!cm_family_ok(addr))
		return -EAFNOSUPPORT;
	s = ff_real.socket(addr->sin6_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	ff_real.setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	ff_real.setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (bind(s, (const struct sockaddr *)addr, cm_sa_len(addr)) < 0 ||
	    ff_real.getsockname(s, (struct sockaddr *)&id->src, &len) < 0) {
		int err = errno;

		ff_real.close(s);
		return -err;
	}
	id->sock = s;
	id->state = S_BOUND;
	return 0;
}

int cm_send_msg(struct cm_id *id, int type, const struct cm_msg *tmpl)
{
	struct cm_msg m;

	if (tmpl)
		m = *tmpl;
	else
		memset(&m, 0, sizeof(m));
	memcpy(m.magic, "FFCM", 4);
	m.type = (uint8_t)type;
	m.psn = htonl(id->psn);
	m.lid = htons(ff_cm.lid);
	m.flags = htons(CMF_MRA);
	memcpy(m.gid, ff_cm.gid, 16);
	if (id->sock < 0 ||
	    ff_real.send(id->sock, &m, sizeof(m), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(m))
		return -ECONNRESET;
	return 0;
}

void cm_await(struct cm_id *id, enum state st)
{
	id->state = st;
	id->mra = 0;
	id->retries = CM_MAX_RETRIES;
	id->deadline = ff_now_ms() + CM_RESPONSE_MS;
	cm_wake_thread();		/* its poll timeout */
}

/* Whether id waits for its peer until id->deadline. */
static int has_deadline(const struct cm_id *id)
{
	return id->state == S_CONNECTING || id->state == S_REQ_SENT || id->state == S_REP_SENT ||
	       id->state == S_DREQ_SENT;
}

/* The active side's connect failed: as the kernel's CM reports a REJ or a timeout. */
void cm_connect_failed(struct cm_id *id, int err)
{
	cm_close_sock(id);
	id->state = S_DONE;
	if (err == ECONNREFUSED)
		cm_id_event(id, EV_REJECTED, REJ_INVALID_SERVICE_ID, NULL);
	else
		cm_id_event(id, EV_UNREACHABLE, -err, NULL);
}

/* The peer's end of the TCP connection went: what the kernel's CM would tell. */
void cm_peer_gone(struct cm_id *id)
{
	enum state st = id->state;

	cm_close_sock(id);
	switch (st) {
	case S_ACCEPTING:
		cm_id_free(id);
		return;
	case S_REQ_SENT:	/* the passive side destroyed its id: a REJ */
		id->state = S_DONE;
		cm_id_event(id, EV_REJECTED, REJ_CONSUMER_DEFINED, NULL);
		return;
	case S_REQ_RCVD:
		id->gone = 1;
		return;
	case S_REP_SENT:	/* the active side destroyed its id or died: its kernel's REJ */
		id->state = S_DONE;
		cm_id_event(id, EV_REJECTED, REJ_CONSUMER_DEFINED, NULL);
		return;
	case S_REP_RCVD:
	case S_CONNECTED:
	case S_DREQ_SENT:
		id->state = S_DONE;
		cm_id_event(id, EV_DISCONNECTED, 0, NULL);
		return;
	default:
		return;
	}
}

/*
 * id's deadline passed: a REQ or REP its peer MRA'd is sent again, as the
 * kernel's CM resends it (a live peer MRAs it again); otherwise the peer
 * is taken as gone, as the kernel's CM does once its resends are spent.
 */
static void timed_out(struct cm_id *id)
{
	enum state st = id->state;

	if (st == S_CONNECTING) {
		cm_connect_failed(id, ETIMEDOUT);
		return;
	}
	/* SIDR's REQ is not resent (the kernel's CM gives it one timeout). */
	if ((st == S_REQ_SENT || st == S_REP_SENT) && id->mra && id->retries && id->ps != RDMA_PS_UDP) {
		if (cm_send_msg(id, st == S_REQ_SENT ? M_REQ : M_REP, &id->mine)) {
			cm_peer_gone(id);
			return;
		}
		id->retries--;
		id->mra = 0;
		id->deadline = ff_now_ms() + CM_RESPONSE_MS;
		return;
	}
	cm_close_sock(id);
	id->state = S_DONE;
	if (st == S_DREQ_SENT)
		cm_id_event(id, EV_DISCONNECTED, -ETIMEDOUT, NULL);	/* IB_CM_DREQ_ERROR */
	else
		cm_id_event(id, EV_UNREACHABLE, -ETIMEDOUT, NULL);	/* IB_CM_REQ_ERROR, IB_CM_REP_ERROR */
}

/* A first PSN (24 bits) of id's own, as the kernel's CM picks one at random. */
uint32_t cm_new_psn(const struct cm_id *id)
{
	return (uint32_t)(ff_now_ns() ^ (uintptr_t)id ^ ((uintptr_t)id >> 24)) & 0xffffff;
}

/* The peer's REQ or REP acknowledged with an MRA, if its CM speaks them. */
static void send_mra(struct cm_id *id)
{
	if (ntohs(id->peer.flags) & CMF_MRA)
		cm_send_msg(id, M_MRA, NULL);
}

static void got_req(struct cm_id *id)
{
	struct cm_id *l = id->listener;

	if (cm_id_handle(id)) {
		ff_debug("rdma_cm: %d ids already: a connect request refused", CM_MAX_IDS);
		cm_peer_gone(id);
		return;
	}
	id->listener = NULL;
	id->ch = l->ch;
	id->uid = l->uid;
	id->state = S_REQ_RCVD;
	/* What INIT_QP_ATTR gives before the ACCEPT: the peer's resources seen from here. */
	id->psn = cm_new_psn(id);
	id->mine.resp_res = id->peer.init_depth;
	id->mine.init_depth = id->peer.resp_res;
	cm_queue_event(l, l->ch, l->uid, id->handle, EV_CONNECT_REQUEST, 0, &id->peer);
	send_mra(id);		/* queued to the program, which may take its time */
}

/* The peer's REQ or REP sent again, or its MRA, crossing our answer to it: nothing to do. */
static int crossed(const struct cm_id *id, int t)
{
	switch (id->state) {
	case S_REP_SENT:
		return t == M_REQ;
	case S_CONNECTED:
		return t == M_REP;
	case S_DREQ_SENT:
		return t == M_REQ || t == M_REP || t == M_MRA;
	default:
		return 0;
	}
}

static void got_msg(struct cm_id *id)
{
	struct cm_msg m;
	int t;

	memcpy(&m, id->rbuf, sizeof(m));
	id->rlen = 0;
	t = memcmp(m.magic, "FFCM", 4) ? 0 : m.type;
	/* The peer's QPN, PSN, LID and GID are its REQ's or REP's: an RTU or MRA has none. */
	if ((id->state == S_ACCEPTING && t == M_REQ) || (id->state == S_REQ_SENT && t == M_REP))
		id->peer = m;
	if (id->state == S_ACCEPTING && t == M_REQ) {
		got_req(id);
	} else if (id->state == S_REQ_SENT && t == M_REP && id->ps == RDMA_PS_UDP) {
		cm_close_sock(id);		/* SIDR's exchange is over */
		id->state = S_DONE;
		cm_id_event(id, EV_ESTABLISHED, 0, &m);
	} else if (id->state == S_REQ_SENT && t == M_REP) {
		id->state = S_REP_RCVD;
		cm_id_event(id, EV_CONNECT_RESPONSE, 0, &m);
		send_mra(id);		/* the RTU waits for the program's next GET_EVENT */
	} else if ((id->state == S_REQ_SENT || id->state == S_REP_SENT) && t == M_MRA) {
		id->mra = 1;
		id->deadline = ff_now_ms() + CM_MRA_MS;
	} else if ((id->state == S_REQ_RCVD && t == M_REQ) || (id->state == S_REP_RCVD && t == M_REP)) {
		send_mra(id);		/* resent: still queued to the program */
	} else if (id->state == S_REQ_SENT && t == M_REJ) {
		cm_close_sock(id);
		id->state = S_DONE;
		cm_id_event(id, EV_REJECTED, (int)ntohl(m.reason), &m);
	} else if (id->state == S_REP_SENT && t == M_RTU) {
		id->state = S_CONNECTED;
		cm_id_event(id, EV_ESTABLISHED, 0, &m);
	} else if ((id->state == S_CONNECTED || id->state == S_REP_SENT ||
		    id->state == S_REP_RCVD || id->state == S_DREQ_SENT) && t == M_DREQ) {
		cm_send_msg(id, M_DREP, NULL);
		cm_close_sock(id);
		id->state = S_DONE;
		cm_id_event(id, EV_DISCONNECTED, 0, NULL);
	} else if (id->state == S_DREQ_SENT && t == M_DREP) {
		cm_close_sock(id);
		id->state = S_DONE;
		cm_id_event(id, EV_DISCONNECTED, 0, NULL);
	} else if (!crossed(id, t)) {
		ff_debug("rdma_cm: message %d in state %d: connection dropped", t, id->state);
		cm_peer_gone(id);
	}
}

static void on_ready(struct cm_id *id, short rev)
{
	ssize_t n;
	int err = 0, s;
	socklen_t len = sizeof(err);

	switch (id->state) {
	case S_LISTEN:
		s = ff_real.accept4(id->sock, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (s >= 0) {
			struct cm_id *a = cm_id_new(id->ch, id->ps);
			socklen_t l1 = sizeof(a->src), l2 = sizeof(a->dst);

			if (!a) {
				ff_real.close(s);
				return;
			}
			a->state = S_ACCEPTING;
			a->listener = id;
			a->sock = s;
			ff_real.setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int));
			ff_real.getsockname(s, (struct sockaddr *)&a->src, &l1);
			ff_real.getpeername(s, (struct sockaddr *)&a->dst, &l2);
		}
		return;
	case S_CONNECTING:
		if (ff_real.getsockopt(id->sock, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
			err = errno;
		if (err) {
			cm_connect_failed(id, err);
			return;
		}
		len = sizeof(id->src);
		ff_real.getsockname(id->sock, (struct sockaddr *)&id->src, &len);
		if (cm_send_msg(id, M_REQ, &id->mine)) {
			cm_connect_failed(id, ECONNRESET);
			return;
		}
		cm_await(id, S_REQ_SENT);
		return;
	default:
		break;
	}
	(void)rev;
	n = ff_real.recv(id->sock, id->rbuf + id->rlen, sizeof(id->rbuf) - id->rlen, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		cm_peer_gone(id);
		return;
	}
	id->rlen += (size_t)n;
	if (id->rlen == sizeof(id->rbuf))
		got_msg(id);
}

static int watched(const struct cm_id *id)
{
	return id->sock >= 0 && id->state != S_BOUND && id->state != S_ADDR && id->state != S_ROUTE &&
	       id->state != S_DONE;
}

/* The sockets' thread: asleep in poll until a socket or the wake pipe is ready, or an id's deadline. */
static void *cm_thread(void *arg)
{
	struct pollfd *p = NULL;
	struct cm_id **who = NULL, *id;
	size_t cap = 0, n, i;
	int64_t now, next;
	char buf[64];

	(void)arg;
	pthread_mutex_lock(&ff_cm.mu);
	for (;;) {
		n = 1;
		for (id = ff_cm.ids; id; id = id->next)
			n++;
		if (n > cap) {
			cap = n * 2;
			p = realloc(p, cap * sizeof(*p));
			who = realloc(who, cap * sizeof(*who));
			if (!p || !who)
				abort();
		}
		p[0] = (struct pollfd){ .fd = ff_cm.wake[0], .events = POLLIN };
		n = 1;
		now = ff_now_ms();
		next = -1;
		for (id = ff_cm.ids; id; id = id->next) {
			if (watched(id) && has_deadline(id) && id->deadline <= now)
				timed_out(id);
			if (!watched(id))
				continue;
			if (has_deadline(id) && (next < 0 || id->deadline - now < next))
				next = id->deadline - now;
			who[n] = id;
			p[n++] = (struct pollfd){ .fd = id->sock,
						  .events = id->state == S_CONNECTING ? POLLOUT : POLLIN };
		}
		pthread_mutex_unlock(&ff_cm.mu);
		ff_real.poll(p, n, (int)next);
		pthread_mutex_lock(&ff_cm.mu);
		while (ff_real.read(ff_cm.wake[0], buf, sizeof(buf)) > 0)
			;
		for (i = 1; i < n; i++) {
			if (!p[i].revents)
				continue;
			/* Still there, with that socket (an id may have gone while unlocked). */
			for (id = ff_cm.ids; id && id != who[i]; id = id->next)
				;
			if (id && id->sock == p[i].fd && watched(id))
				on_ready(id, p[i].revents);
		}
	}
	return NULL;
}

