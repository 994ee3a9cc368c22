/* SPDX-License-Identifier: MIT */
/*
 * Wrapped socket lifecycle calls: socket, connect, listen, accept(4), close,
 * dup/dup2/dup3/fcntl(F_DUPFD*), getsockname/getpeername, shutdown, ioctl.
 *
 * Only AF_INET/AF_INET6 SOCK_STREAM (TCP) sockets are tracked; every other
 * fd goes straight to libc. Wrappers save errno from the real call and
 * return it unchanged, whatever the shim did in between.
 *
 * dup of a connection that still waits for its decision opts it out (it
 * stays on the overlay): a swap would have to replace every fd number at
 * once, and duplicating a half-open socket is rare enough not to be worth
 * it. The peer is not harmed: its agent sees no CONNECT and answers overlay
 * within its 50 ms bound.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "agent/agent.h"
#include "calls/calls.h"
#include "core/core.h"
#include "freeflow/proto.h"
#include "links/links.h"
#include "proc/proc.h"
#include "setup/setup.h"
#include "shm/shm.h"
#include "wait/wait.h"

static int is_tcp(int domain, int type, int protocol)
{
	type &= ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
	return (domain == AF_INET || domain == AF_INET6) && type == SOCK_STREAM &&
	       (protocol == 0 || protocol == IPPROTO_TCP);
}

struct ff_conn *ff_fd_forget(int fd)
{
	struct ff_slot *s = ff_fd_slot(fd);
	struct ff_conn *c;

	/* Held for a move back to shm (shm/resume.c): its fds stay until that ends. */
	while (s && s->conn && s->conn->held)
		ff_table_wait();
	c = ff_fd_detach(fd);

	return c && ff_conn_unref(c) ? c : NULL;
}

/*
 * Table lock held: point fd at c. A conn the slot still had (its fd was
 * closed or replaced: dup2 over it, or a close the shim did not see) is
 * returned if that was its last fd, for ff_conn_closed once unlocked.
 */
static struct ff_conn *put_slot(int fd, struct ff_conn *c)
{
	struct ff_conn *old = ff_fd_forget(fd);

	if (c)
		ff_fd_attach(fd, c);
	return old;
}

/* The tracked conn of fd with the lock held, or NULL (lock not held). */
static struct ff_conn *lock_conn(int fd)
{
	struct ff_slot *s = ff_slot_enter(fd);

	if (ff_busy || !s || !(atomic_load(&s->flags) & FF_FD_TRACKED))
		return NULL;
	ff_table_lock();
	if (s->conn)
		return s->conn;
	ff_table_unlock();
	return NULL;
}

/*
 * fd is a new file the shim does not track. Its slot can still describe a
 * socket closed behind the shim's back (close_range, fclose of an
 * fdopen'ed socket: libc-internal closes); forget it, or this fd would
 * answer with another connection's names and lose sendto's address.
 */
static void untracked(int fd)
{
	struct ff_slot *s = ff_fd_slot(fd);
	struct ff_conn *old;

	if (!s || !(atomic_load_explicit(&s->flags, memory_order_relaxed) & FF_FD_TRACKED))
		return;
	ff_table_lock();
	old = put_slot(fd, NULL);
	ff_table_unlock();
	ff_conn_closed(old);
}

FF_EXPORT int socket(int domain, int type, int protocol)
{
	int fd = REAL(socket)(domain, type, protocol), err = errno;
	struct ff_conn *c, *old;

	if (fd < 0 || ff_busy || !ff_fd_slot(fd))
		return fd;
	if (!is_tcp(domain, type, protocol)) {
		untracked(fd);
		return fd;
	}
	c = ff_conn_new(domain);
	ff_table_lock();
	old = put_slot(fd, c);
	ff_table_unlock();
	ff_conn_closed(old);
	errno = err;
	return fd;
}

/* connect() just returned 0 or EINPROGRESS on a SOCKET-state conn (table lock held). */
static void connect_done(int fd, struct ff_conn *c, int ret, int err)
{
	if (ret == 0) {
		c->pending_fd = fd;
		ff_conn_set_state(c, FF_ST_NEGOTIATING);
		c->refs++;
		ff_table_unlock();
		ff_negotiate(fd, c, FF_MSG_CONNECT);
		return;
	}
	if (err == EINPROGRESS || err == EINTR || err == EAGAIN) {
		enum ff_settle_kind kind = !c->offer	  ? FF_SETTLE_PLAIN
					   : c->offer->sh ? FF_SETTLE_OFFERED
							  : FF_SETTLE_OFFERED_ACROSS;
		int bell = c->offer ? c->offer->bell : -1;

		c->pending_fd = fd;
		ff_conn_set_state(c, FF_ST_PENDING);
		ff_epoll_arm_pending(fd, c);
		ff_table_unlock();
		/* Decided once it completes, however late the program looks. */
		ff_settler_watch(fd, c, kind, bell);
		return;
	}
	ff_syn_unmark(fd, c);	/* no connection: the socket may connect again */
	ff_table_unlock();
}

/*
 * Before the SYN of a connection the shim will negotiate: mark it
 * (synmark.c). A socket whose SYN cannot be marked stays on the overlay:
 * its acceptor would take it for a peer without the library.
 */
static enum ff_state mark_syn(int fd, const struct sockaddr *sa, socklen_t len)
{
	struct sockaddr_storage to = { 0 };
	struct ff_conn *c;
	enum ff_state st;
	int ret = 0, fastopen;

	memcpy(&to, sa, len < sizeof(to) ? len : sizeof(to));
	if (ff_skip_loopback(&to))
		return FF_ST_SOCKET;
	c = lock_conn(fd);
	if (!c)
		return FF_ST_OVERLAY;	/* closed meanwhile */
	/* With TCP Fast Open the SYN may leave after the decision, its mark gone. */
	fastopen = c->state == FF_ST_SOCKET && c->fastopen;
	if (c->state == FF_ST_SOCKET && !fastopen)
		ret = ff_syn_mark(fd, c);
	if (ret || fastopen)
		ff_conn_set_state(c, FF_ST_OVERLAY);
	st = c->state;
	ff_table_unlock();
	if (ret || fastopen)
		ff_fallback(fd, "its SYN cannot carry the mark: %s",
			    fastopen ? "TCP_FASTOPEN_CONNECT" : strerror(-ret));
	return st;
}

static int is_inet(const struct sockaddr *sa)
{
	return sa && (sa->sa_family == AF_INET || sa->sa_family == AF_INET6);
}

FF_EXPORT int connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	struct ff_conn *c = lock_conn(fd);
	struct ff_offer *offer = NULL;
	enum ff_state st;
	int ret, err, none = 0;

	if (!c)
		return REAL(connect)(fd, sa, len);
	st = c->state;
	ff_table_unlock();
	if (st == FF_ST_SWAPPED) {
		errno = EISCONN;
		return -1;
	}
	if (st == FF_ST_SOCKET && is_inet(sa))
		st = mark_syn(fd, sa, len);
	/* Before the SYN leaves, so the acceptor finds the offer (link.c). */
	if (st == FF_ST_SOCKET && is_inet(sa))
		offer = ff_link_offer(fd, sa, len, &none);
	/* No link yet: the first connection there may bring one (contact.c). */
	if (none && ff_contact_await(fd, c, sa, len))
		offer = ff_link_offer(fd, sa, len, &none);
	ret = ff_real.connect(fd, sa, len);
	err = errno;
	/*
	 * The acceptor may take the offer and reset the overlay socket before
	 * this thread returns from the handshake: connected, on the link's channel.
	 */
	if (ret && offer && err != EINPROGRESS && ff_offer_taken(offer))
		ret = 0;
	if (st == FF_ST_PENDING || st == FF_ST_NEGOTIATING) {
		/* A repeated connect() is how some programs learn it completed. */
		if (ret == 0 || err == EISCONN)
			ff_settle(fd, 1);
	} else if (st == FF_ST_SOCKET && is_inet(sa)) {
		c = lock_conn(fd);
		if (c && c->state == FF_ST_SOCKET && !c->offer &&
		    (ret == 0 || err == EINPROGRESS || err == EINTR || err == EAGAIN)) {
			c->offer = offer;
			offer = NULL;
		}
		if (c && c->state == FF_ST_SOCKET) {
			connect_done(fd, c, ret, err);
		} else if (c) {
			if (c->state == FF_ST_OVERLAY)	/* kept there by another thread meanwhile */
				ff_syn_unmark(fd, c);
			ff_table_unlock();
		}
	}
	ff_offer_free(offer);	/* the connection was not made */
	errno = err;
	return ret;
}

FF_EXPORT int listen(int fd, int backlog)
{
	struct sockaddr_storage local;
	socklen_t ll = sizeof(local);
	struct ff_conn *c = lock_conn(fd);
	int ret, err, ok;

	/* From the first SYN on: accepted() reads each one's mark. */
	if (c && c->state == FF_ST_SOCKET && !c->app_saves_syn)
		ff_syn_keep(fd, 1);
	if (c)
		ff_table_unlock();
	ret = REAL(listen)(fd, backlog);
	err = errno;
	if (ret || ff_real.getsockname(fd, (void *)&local, &ll))
		return ret;
	c = lock_conn(fd);
	if (!c)
		return ret;
	if (c->state != FF_ST_SOCKET) {
		ff_table_unlock();
		return ret;
	}
	c->state = FF_ST_LISTEN;
	c->ends.local = local;
	c->ends.local_len = ll;
	c->refs++;
	ff_table_unlock();
	ok = ff_announce(FF_MSG_LISTEN, &local, NULL);
	if (ok)
		ff_fallback(fd, "listener not registered with the agent: %s", ff_agent_strerror(ok));
	ff_table_lock();
	/* Loopback: never announced, what it accepts never negotiated. */
	if (ok == -EADDRNOTAVAIL && !c->app_saves_syn)
		ff_syn_keep(fd, 0);
	ff_listener_registered(c, ok == 0);
	if (ff_conn_unref(c))
		ff_conn_free(c);
	ff_table_unlock();
	errno = err;
	return ret;
}

/* A connection accepted on a registered listener is negotiated before the app sees it. */
static int accepted(int lfd, int nfd)
{
	struct ff_conn *l = lock_conn(lfd), *c = NULL, *old;
	int read_mark = 0;

	if (l && l->state == FF_ST_LISTEN && l->registered && ff_fd_slot(nfd))
		c = ff_conn_new(l->family);
	if (!c) {
		if (l)
			ff_table_unlock();
		untracked(nfd);
		return nfd;
	}
	ff_sockopt_inherit(c, l);
	read_mark = !l->app_saves_syn;	/* reading the SYN would take it from the application */
	old = put_slot(nfd, c);
	c->pending_fd = nfd;
	ff_conn_set_state(c, FF_ST_NEGOTIATING);
	c->refs++;
	ff_table_unlock();
	ff_conn_closed(old);
	/* NEGOTIATING: no other thread touches c until ff_negotiate decides. */
	c->peer_nolib = read_mark &&
			ff_syn_unmarked(nfd, c->family, &c->ends.local, &c->ends.remote);
	ff_negotiate(nfd, c, FF_MSG_ACCEPT);
	return nfd;
}

FF_EXPORT int accept(int fd, struct sockaddr *sa, socklen_t *len)
{
	int nfd, err;

	ff_init();	/* before xlink.c reads ff_real */
	if (!ff_busy && ff_xlinks_any() && ff_xlink_before_accept(fd) < 0)
		return -1;
	nfd = REAL(accept)(fd, sa, len);
	err = errno;

	if (nfd < 0 || ff_busy)
		return nfd;
	nfd = accepted(fd, nfd);
	errno = err;
	return nfd;
}

FF_EXPORT int accept4(int fd, struct sockaddr *sa, socklen_t *len, int flags)
{
	int nfd, err;

	ff_init();	/* before xlink.c reads ff_real */
	if (!ff_busy && ff_xlinks_any() && ff_xlink_before_accept(fd) < 0)
		return -1;
	nfd = REAL(accept4)(fd, sa, len, flags);
	err = errno;

	if (nfd < 0 || ff_busy)
		return nfd;
	nfd = accepted(fd, nfd);
	errno = err;
	return nfd;
}

/*
 * The last fd of a conn is gone: it leaves the ledger, and the agent is
 * told what it keeps track of, its registration of the listener (only the
 * registering process's own, listeners.c) and every connection it
 * answered, fast or overlay (it lists them until CLOSED), on this thread's
 * session: UNLISTEN waits for the agent's OK (bounded), CLOSED is a
 * notification sent without waiting.
 */
void ff_conn_closed(struct ff_conn *c)
{
	if (!c)
		return;
	if (c->shm)
		ff_shm_closing(c->shm, &c->ends);
	if (c->ledger)
		ff_ledger_close(c->ledger);
	if (c->state == FF_ST_LISTEN)
		ff_links_unlisten(&c->ends.local);
	if (c->state == FF_ST_LISTEN && c->registered && c->reg_pid == getpid())
		ff_announce(FF_MSG_UNLISTEN, &c->ends.local, NULL);
	else if (c->answered && (c->state == FF_ST_SWAPPED || c->state == FF_ST_OVERLAY))
		ff_announce(FF_MSG_CLOSED, &c->ends.local, &c->ends.remote);
	ff_table_lock();
	ff_conn_free(c);
	ff_table_unlock();
}

FF_EXPORT int close(int fd)
{
	struct ff_slot *s = ff_slot_enter(fd);
	struct ff_conn *c;
	unsigned fl;
	int ret, err;

	if (ff_busy || !s || !(fl = atomic_load(&s->flags)))
		return REAL(close)(fd);
	if (fl & FF_FD_RING)
		ff_ring_closed(fd);
	if (fl & FF_FD_RDMACM)
		ff_rdmacm_closed(fd);
	/* Clear the slot first: once closed, the number may be reused at once. */
	ff_table_lock();
	c = ff_fd_forget(fd);
	ff_table_unlock();
	ret = ff_real.close(fd);
	err = errno;
	ff_conn_closed(c);
	errno = err;
	return ret;
}

/*
 * Table lock held: the conn at slot s of fd (or NULL), kept on the overlay
 * if it has no decision yet (*changed set then): a socket not connected
 * yet is never negotiated, a pending one is opted out.
 */
static struct ff_conn *keep_overlay(int fd, struct ff_slot *s, int *changed)
{
	struct ff_conn *c;

	*changed = 0;
	c = s ? ff_conn_settled(s) : NULL;
	if (c && c->state == FF_ST_PENDING) {
		ff_syn_unmark(fd, c);
		ff_conn_set_state(c, FF_ST_OVERLAY);
		ff_epoll_replay(fd, c->epregs, 0);
		ff_conn_forget_epregs(c);
		*changed = 1;
	}
	return c;
}

void ff_fd_keep_overlay(int fd, const char *why)
{
	struct ff_slot *s = ff_fd_slot(fd);
	struct ff_conn *c;
	int changed;

	if (!s)
		return;
	ff_table_lock();
	c = keep_overlay(fd, s, &changed);
	if (c && c->state == FF_ST_SOCKET) {
		ff_conn_set_state(c, FF_ST_OVERLAY);
		changed = 1;
	}
	ff_table_unlock();
	if (changed)
		ff_fallback(fd, "%s before the decision", why);
}

/* newfd now refers to oldfd's file: make it share oldfd's conn. */
static void dup_track(int oldfd, int newfd)
{
	struct ff_slot *s = ff_fd_slot(oldfd);
	struct ff_conn *c, *old;
	int opted_out, ring, uverbs;

	ff_epset_dup(oldfd, newfd);
	if (!ff_fd_slot(newfd) || oldfd == newfd)
		return;
	ring = atomic_load(&ff_fd_slot(newfd)->flags) & FF_FD_RING;
	uverbs = s && (atomic_load(&s->flags) & FF_FD_UVERBS);
	ff_table_lock();
	c = keep_overlay(oldfd, s, &opted_out);
	old = put_slot(newfd, c);
	ff_table_unlock();
	ff_conn_closed(old);
	if (ring)
		ff_ring_closed(newfd);
	if (uverbs)
		ff_fd_mark(newfd, FF_FD_UVERBS);	/* a copy of the command file answers as it does */
	if (opted_out)
		ff_fallback(oldfd, "duplicated (as fd %d) before the decision", newfd);
}

FF_EXPORT int dup(int fd)
{
	int nfd = REAL(dup)(fd), err = errno;

	if (nfd >= 0 && !ff_busy)
		dup_track(fd, nfd);
	errno = err;
	return nfd;
}

/* fd2, about to be replaced, is a connection held for its move back to shm: wait for it. */
static void replacing(int fd2, struct ff_entered *e)
{
	struct ff_slot *s = ff_busy ? NULL : ff_slot_enter(fd2);

	if (s && (atomic_load(&s->flags) & FF_FD_MOVED))
		ff_moved_enter(fd2, 1, e);
}

FF_EXPORT int dup2(int fd, int fd2)
{
	FF_ENTERED;
	int ret, err;

	replacing(fd2, &ff_entered_);
	ret = REAL(dup2)(fd, fd2);
	err = errno;

	if (ret >= 0 && !ff_busy)
		dup_track(fd, ret);
	errno = err;
	return ret;
}

FF_EXPORT int dup3(int fd, int fd2, int flags)
{
	FF_ENTERED;
	int ret, err;

	replacing(fd2, &ff_entered_);
	ret = REAL(dup3)(fd, fd2, flags);
	err = errno;

	if (ret >= 0 && !ff_busy)
		dup_track(fd, ret);
	errno = err;
	return ret;
}

/*
 * fcntl's third argument is an int or a pointer depending on cmd; passing
 * it on as a pointer-sized value is what the calling convention of every
 * supported ABI makes safe (and what glibc's own wrappers do).
 */
/* Whether fd is on shared memory (one relaxed load). */
static int on_shm(int fd)
{
	struct ff_slot *s = ff_slot_enter(fd);

	return !ff_busy && s && (atomic_load_explicit(&s->flags, memory_order_relaxed) & FF_FD_SHM);
}

/*
 * O_NONBLOCK or FD_CLOEXEC changed on a connection that another thread
 * (the settler, settler.c) may be deciding: changed under the table lock
 * once no decision is in progress, so that the swap, which copies both
 * under that lock, cannot copy the old ones. Returns with the lock held
 * if taken.
 */
static int hold_decision(int fd)
{
	struct ff_slot *s = ff_slot_enter(fd);

	if (ff_busy || !s || !(atomic_load_explicit(&s->flags, memory_order_relaxed) & FF_FD_PENDING))
		return 0;
	ff_table_lock();
	ff_conn_settled(s);
	return 1;
}

/* O_NONBLOCK of an shm connection is cached for its data path (shm/io.c). */
static int fcntl_common(int (*real)(int, int, ...), int fd, int cmd, void *arg)
{
	int held = (cmd == F_SETFL || cmd == F_SETFD) && hold_decision(fd);
	int ret = real(fd, cmd, arg), err = errno;

	if (held)
		ff_table_unlock();

	if (ret >= 0 && !ff_busy && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC))
		dup_track(fd, ret);
	if (ret >= 0 && cmd == F_SETFL && on_shm(fd))
		ff_shm_set_nonblock(fd, ((int)(intptr_t)arg & O_NONBLOCK) != 0);
	errno = err;
	return ret;
}

FF_EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	return fcntl_common(REAL(fcntl), fd, cmd, arg);
}

FF_EXPORT int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (!REAL(fcntl64)) {
		errno = ENOSYS;
		return -1;
	}
	return fcntl_common(ff_real.fcntl64, fd, cmd, arg);
}

/* A swapped fd answers with the overlay addresses it had as TCP. */
static int overlay_name(int fd, int peer, struct sockaddr *sa, socklen_t *len)
{
	struct ff_conn *c = lock_conn(fd);
	const struct sockaddr_storage *a;
	socklen_t n;

	if (!c)
		return 1;
	if (c->state != FF_ST_SWAPPED) {
		ff_table_unlock();
		return 1;
	}
	a = peer ? &c->ends.remote : &c->ends.local;
	n = peer ? c->ends.remote_len : c->ends.local_len;
	memcpy(sa, a, n < *len ? n : *len);
	*len = n;
	ff_table_unlock();
	return 0;
}

FF_EXPORT int getsockname(int fd, struct sockaddr *sa, socklen_t *len)
{
	if (sa && len && overlay_name(fd, 0, sa, len) == 0)
		return 0;
	return REAL(getsockname)(fd, sa, len);
}

FF_EXPORT int getpeername(int fd, struct sockaddr *sa, socklen_t *len)
{
	if (sa && len && overlay_name(fd, 1, sa, len) == 0)
		return 0;
	return REAL(getpeername)(fd, sa, len);
}

/*
 * shutdown() sends a FIN, so an established pending connection is decided
 * first; one still connecting is left to the kernel (which aborts it). On
 * shm the bell socket is left alone: its EOF means the peer is gone.
 */
FF_EXPORT int shutdown(int fd, int how)
{
	struct ff_slot *s = ff_slot_enter(fd);
	FF_ENTERED;
	int ret;

	if (!ff_busy)
		ff_settle(fd, 1);
	if (!ff_busy && s && (atomic_load(&s->flags) & FF_FD_MOVED) && !ff_moved_enter(fd, 1, &ff_entered_))
		ff_moved_shut(fd, how);
	if (on_shm(fd)) {
		ret = ff_shm_shutdown(fd, how);
		if (ret != FF_SHM_MOVED) {
			if (ret < 0)
				errno = -ret;
			return ret < 0 ? -1 : 0;
		}
	}
	return REAL(shutdown)(fd, how);
}

/*
 * ioctl: on shm the queue sizes come from the rings; FIONBIO sets
 * O_NONBLOCK on the bell socket's file (the kernel does it), and the data
 * path's cached copy follows. The third argument is passed on as a pointer,
 * as with fcntl.
 */
FF_EXPORT int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	void *arg;
	int ret, val, err, held;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (arg && on_shm(fd) && (req == FIONREAD || req == SIOCOUTQ || req == SIOCOUTQNSD ||
				  req == SIOCATMARK)) {
		ret = ff_shm_ioctl(fd, req, &val);
		if (ret == 0) {
			memcpy(arg, &val, sizeof(val));
			return 0;
		}
		if (ret != FF_SHM_MOVED) {
			errno = -ret;
			return -1;
		}
	}
	held = (req == FIONBIO || req == FIOCLEX || req == FIONCLEX) && hold_decision(fd);
	ret = REAL(ioctl)(fd, req, arg);
	err = errno;
	if (held)
		ff_table_unlock();
	if (ret == 0 && req == FIONBIO && arg && on_shm(fd))
		ff_shm_set_nonblock(fd, *(int *)arg != 0);
	errno = err;
	return ret;
}
