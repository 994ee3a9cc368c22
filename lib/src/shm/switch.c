/* SPDX-License-Identifier: MIT */
/*
 * Moving a shared-memory connection down to a plain kernel channel
 * (docs/SHM.md, "Moving down", has the steps, the argument and the
 * bounds), so that an shm connection is never shared between processes:
 * before fork and vfork (every connection), posix_spawn and exec (the ones
 * the new image keeps), sendmsg passing its fd with SCM_RIGHTS, and splice,
 * which needs a kernel socket. And adopting the peer's move, at this end's
 * next call on the connection.
 *
 * Both ends hold both ring locks of their process while they do it. The end
 * that moves down (A; B is the peer) wins the CAS of switch_by, makes a
 * socketpair (X, Y), moves what B published into ring B->A to Y, waits
 * (bounded) until B's consumer is out of ring A->B (cons_busy), sends `S`
 * with Y on the bell socket, moves ring A->B's unread bytes into X and puts
 * X at every fd. B, adopting, receives Y, moves ring B->A's unread bytes
 * into it and puts Y at its fds. Every producer loads switch_by after
 * publishing head, behind a full fence (Dekker's pattern with A's CAS), so
 * each byte is moved by exactly one of them.
 *
 * Putting the new socket in place is a swap as in negotiate.c; the conn
 * stays SWAPPED with kern_family AF_UNIX. A broken or hostile peer costs a
 * bounded wait (BUSY_WAIT_MS, SWITCH_WAIT_MS, MOVE_WAIT_MS) and then
 * ECONNRESET, never a hang; anything malformed breaks the connection at
 * once, its bell socket shut down both ways.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "core/core.h"
#include "shm/shm.h"

#define BUSY_WAIT_MS	1000
#define SWITCH_WAIT_MS	(BUSY_WAIT_MS + 1000)
#define MOVE_WAIT_MS	5000
/* fds moved down per scan of the table in ff_shm_switch_all (more: another scan). */
#define SCAN_MAX	64

_Atomic int ff_shm_avoided;

static uint32_t peer_role(const struct ff_shm *sh)
{
	return FF_SHM_CONNECTOR + FF_SHM_ACCEPTOR - sh->role;
}

/* ---- moving bytes ---- */

/*
 * Send ring bytes [i, i + n) of r into sock. end 0: only what fits now;
 * else wait for room until then (-ETIMEDOUT). The count sent, or -errno
 * (-EPIPE: nobody is left to read them).
 */
static ssize_t ring_to_sock(struct ff_shm *sh, struct ff_shm_ring *r, uint64_t i, uint64_t n,
			    int sock, int64_t end)
{
	uint64_t done = 0;

	while (done < n) {
		struct iovec v[2];
		struct msghdr mh = { .msg_iov = v, .msg_iovlen = 1 };
		uint8_t *p;
		size_t k = ff_shm_seg(sh, r, i + done, n - done, &p);
		ssize_t w;

		v[0] = (struct iovec){ p, k };
		if (k < n - done) {
			v[1].iov_len = ff_shm_seg(sh, r, i + done + k, n - done - k, &p);
			v[1].iov_base = p;
			mh.msg_iovlen = 2;
		}
		w = ff_real.sendmsg(sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w >= 0) {
			done += (uint64_t)w;
			if (!w)
				break;
		} else if (errno == EAGAIN && end) {
			if (ff_poll_until(sock, POLLOUT, end) <= 0)
				return -ETIMEDOUT;
		} else if (errno == EAGAIN) {
			break;
		} else if (errno != EINTR) {
			return -errno;
		}
	}
	return (ssize_t)done;
}

/* Room for a full ring in sock's send buffer, if the kernel allows that much. */
static void room_for_ring(int sock, const struct ff_shm *sh)
{
	int v = (int)sh->size;

	ff_real.setsockopt(sock, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
}

/* Step 1 (A): hand ring B->A's published bytes to Y. rx.mu held. */
static int hand_over_rx(int fd, struct ff_shm *sh, int y)
{
	int shut = ff_shm_rx_shut(sh);
	int64_t avail = ff_shm_rx_avail(sh);
	ssize_t n;

	if (avail < 0)
		return (int)avail;
	n = ring_to_sock(sh, &sh->rx, atomic_load_explicit(&sh->rx.mine, memory_order_relaxed),
			 (uint64_t)avail, y, 0);
	if (n < 0)
		return (int)n;
	if (n)
		ff_shm_rx_consumed(fd, sh, (uint64_t)n);
	if (shut && n == avail)
		ff_real.shutdown(y, SHUT_WR);
	return 0;
}

/* Whether the peer's last copy of the bell socket is gone (it exited or closed). */
static int peer_gone(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return ff_real.poll(&p, 1, 0) > 0 && (p.revents & POLLHUP);
}

/* Step 2 (A): B's consumer out of ring A->B, so its tail is final (or B is gone). */
static int peer_consumer_out(int fd, struct ff_shm *sh)
{
	int64_t end = ff_now_ms() + BUSY_WAIT_MS;

	for (unsigned i = 0; atomic_load_explicit(sh->tx.cons_busy, memory_order_acquire); i++) {
		if (i < 100) {
			sched_yield();	/* a copy-out takes microseconds */
			continue;
		}
		if (peer_gone(fd))
			return 0;
		if (ff_now_ms() >= end)
			return ff_shm_broken(sh, "the peer's consumer stayed busy (cons_busy) for 1 s");
		nanosleep(&(struct timespec){ .tv_nsec = 100000 }, NULL);
	}
	return 0;
}

/* Step 3 (A): `S` with Y. A peer that is gone cannot take it: that is no error. */
static int send_switch(int fd, struct ff_shm *sh, int y)
{
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	char s = FF_SHM_SWITCH;
	struct iovec v = { &s, 1 };
	struct msghdr mh = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = ctl.b,
			     .msg_controllen = sizeof(ctl.b) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	int64_t end = ff_now_ms() + SWITCH_WAIT_MS;

	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &y, sizeof(int));
	for (;;) {
		if (ff_real.sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) == 1)
			return 0;
		if (errno == EPIPE || errno == ECONNRESET)
			return 0;
		if (errno == EAGAIN && ff_poll_until(fd, POLLOUT, end) > 0)
			continue;
		if (errno != EINTR)
			return ff_shm_broken(sh, errno == EAGAIN ?
					     "the peer leaves its bell socket full: no room for the switch message" :
					     "the switch message cannot be sent");
	}
}

/* The bytes this end wrote that the peer has not read, into sock (step 4; B's move). tx.mu held. */
static int flush_tx(struct ff_shm *sh, int sock)
{
	int64_t room = ff_shm_tx_room(sh);
	uint64_t unread;
	ssize_t n;

	if (room < 0)
		return (int)room;
	unread = sh->cap - (uint64_t)room;
	n = ring_to_sock(sh, &sh->tx, atomic_load_explicit(&sh->tx.mine, memory_order_relaxed) - unread,
			 unread, sock, ff_now_ms() + MOVE_WAIT_MS);
	if (n == -ETIMEDOUT)
		return ff_shm_broken(sh, "the peer did not read the bytes moved down for 5 s");
	return n < 0 && n != -EPIPE ? (int)n : 0;
}

/* ---- receiving the peer's switch ---- */

/* Received fds: at most two are kept apart, so that two or more are seen as wrong. */
struct rcvd {
	int fds[2];
	int n;			/* fds received; > 2 when truncated */
};

static void close_rcvd(struct rcvd *r)
{
	for (int i = 0; i < r->n && i < 2; i++)
		ff_real.close(r->fds[i]);
	r->n = 0;
}

/* One byte of the bell socket, with whatever fds came along: 1, 0 at EOF, or -errno. */
static int recv_one(int fd, char *b, struct rcvd *r)
{
	union {
		char b[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec v = { b, 1 };
	struct msghdr mh = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = ctl.b,
			     .msg_controllen = sizeof(ctl.b) };
	ssize_t n = ff_real.recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

	r->n = 0;
	if (n < 0)
		return -errno;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		size_t k;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++, r->n++)
			if (r->n < 2)
				memcpy(&r->fds[r->n], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
	}
	if (mh.msg_flags & MSG_CTRUNC)
		r->n += 2;
	return (int)n;
}

/*
 * B: the peer's socket from its `S`, doorbells before it skipped. Reading
 * the bell is done under wait_mu, as the waiters' draining is (shm/ring.c).
 */
static int recv_switch(int fd, struct ff_shm *sh, int *out)
{
	int64_t end = ff_now_ms() + SWITCH_WAIT_MS;
	struct rcvd r;
	char b = 0;
	int n;

	for (;;) {
		pthread_mutex_lock(&sh->wait_mu);
		n = recv_one(fd, &b, &r);
		pthread_mutex_unlock(&sh->wait_mu);
		/* A doorbell rung before the switch (a peer ringing on and on gets no longer). */
		if (n == 1 && b == FF_SHM_BELL && !r.n && ff_now_ms() < end)
			continue;
		if (n == 1 && b == FF_SHM_SWITCH && r.n == 1 && ff_is_socket(r.fds[0], SOCK_STREAM, 1)) {
			*out = r.fds[0];
			return 0;
		}
		close_rcvd(&r);
		if (n == 1 && b == FF_SHM_SWITCH)
			return ff_shm_broken(sh, "the switch message does not carry exactly one AF_UNIX stream socket");
		if (n == 1)
			return ff_shm_broken(sh, b != FF_SHM_BELL ?
					     "a byte on the bell socket is neither a doorbell nor a switch" :
					     r.n ? "a doorbell carried fds" :
					     "doorbells, but no switch message within 2 s of switch_by");
		if (n == 0)
			return ff_shm_broken(sh, "the peer left while moving the connection down");
		if (n != -EAGAIN && n != -EINTR)
			return ff_shm_broken(sh, "the bell socket cannot be read");
		if (n == -EAGAIN && ff_poll_until(fd, POLLIN, end) <= 0)
			return ff_shm_broken(sh, "switch_by set by the peer, but no switch message within 2 s");
	}
}

/* ---- putting the kernel socket in place ---- */

static const int size_opts[] = { SO_SNDBUF, SO_RCVBUF };

/*
 * The buffer sizes the program set onto sock (opts.c keeps them). Not
 * the bell socket's defaults: those would shrink sock from the ring's room
 * (room_for_ring) to the kernel's 208 KiB, and two ends that each write a
 * whole message before they read, which the ring held, would block
 * forever (docs/SHM.md, "Moving down").
 */
static void carry_buffers(struct ff_conn *c, int bell, int sock)
{
	for (size_t i = 0; i < sizeof(size_opts) / sizeof(size_opts[0]); i++) {
		int v = 0;
		socklen_t l = sizeof(v);

		/* The kernel reports twice what was set, and doubles what is set. */
		if (ff_sockopt_app_set(c, SOL_SOCKET, size_opts[i]) &&
		    !ff_real.getsockopt(bell, SOL_SOCKET, size_opts[i], &v, &l) && (v /= 2) > 0)
			ff_real.setsockopt(sock, SOL_SOCKET, size_opts[i], &v, sizeof(v));
	}
}

/* Table lock held: the fds of sh's conn, at most max of them; their conn in *c. */
static int conn_fds(const struct ff_shm *sh, int *fds, int max, struct ff_conn **c)
{
	int hw = ff_table_hiwater(), n = 0;

	*c = NULL;
	for (int fd = 0; fd <= hw; fd++) {
		struct ff_slot *s = ff_fd_slot(fd);

		if (s->conn && s->conn->shm == sh) {
			*c = s->conn;
			if (n == max)
				return -EMFILE;
			fds[n++] = fd;
		}
	}
	return n;
}

/*
 * Table lock held: sock at each of fds (the bell socket's flags and
 * options; a parked one's TCP options, which the channel kept), epoll
 * replayed.
 */
static int swap_fds(struct ff_conn *c, const int *fds, int n, int sock, int parked)
{
	int fl = ff_real.fcntl(fds[0], F_GETFL);

	if (fl < 0 || ff_real.fcntl(sock, F_SETFL, fl & O_NONBLOCK) < 0)
		return -errno;
	carry_buffers(c, fds[0], sock);
	ff_sockopt_carry(fds[0], sock, c);
	if (parked)
		ff_sockopt_to_tcp(c, sock);
	/* Wake this process's threads asleep on the bell: they retry and find it moved. */
	ff_real.shutdown(fds[0], SHUT_RD);
	for (int i = 0; i < n; i++) {
		int fdfl = ff_real.fcntl(fds[i], F_GETFD);

		if (fdfl < 0 || ff_real.dup3(sock, fds[i], fdfl & FD_CLOEXEC ? O_CLOEXEC : 0) < 0)
			return -errno;
	}
	for (int i = 0; i < n; i++) {
		atomic_fetch_and(&ff_fd_slot(fds[i])->flags, (uint16_t)~FF_FD_SHM);
		ff_epoll_replay(fds[i], c->epregs, 1);
	}
	return 0;
}

/* A parked socket's names as the connection's ends (kept as they were if unreadable). */
static void park_ends(int sock, struct ff_ends *ends)
{
	struct ff_ends now = { .local_len = sizeof(now.local), .remote_len = sizeof(now.remote) };

	if (!ff_real.getsockname(sock, (struct sockaddr *)&now.local, &now.local_len) &&
	    !ff_real.getpeername(sock, (struct sockaddr *)&now.remote, &now.remote_len))
		*ends = now;
}

/*
 * sock, which now carries everything, becomes the connection at every fd
 * of it; sh is let go. Both ring locks held: the table lock is taken after
 * them (shm.h). A parked connection's sock is TCP at its overlay tuple:
 * the connection is then overlay TCP, followed only for a move back
 * (FF_MOVED_PARKED, shm/resume.c).
 */
static int install(struct ff_shm *sh, int sock, int parked)
{
	unsigned st = atomic_load(&sh->state);
	int fds[256], n, r = 0;
	struct ff_conn *c;

	if (st & FF_SHM_SHUT_WR)
		ff_real.shutdown(sock, SHUT_WR);
	if (st & FF_SHM_SHUT_RD)
		ff_real.shutdown(sock, SHUT_RD);
	/*
	 * Under wait_mu: this process's waiters read the bell, and copy it
	 * to sleep on, only under it after checking FF_SHM_CLOSED
	 * (shm/ring.c), so none takes bytes out of sock, or sleeps on it,
	 * for the bell that was at these fds.
	 */
	pthread_mutex_lock(&sh->wait_mu);
	ff_table_lock();
	n = conn_fds(sh, fds, (int)(sizeof(fds) / sizeof(fds[0])), &c);
	if (n > 0)
		r = swap_fds(c, fds, n, sock, parked);
	if (n > 0 && !r) {
		/*
		 * The agent lists it as it is now; parked, at its socket's ends,
		 * which differ from the channel's where the agent gave it a port
		 * of its own (two connections at one tuple).
		 */
		if (parked) {
			park_ends(sock, &c->ends);
			ff_ledger_moved(c->ledger, fds[0], FF_PATH_OVERLAY, 0, "parked", &c->ends);
			ff_conn_set_state(c, FF_ST_OVERLAY);
			c->kern_family = c->family;	/* checked: park_family_ok */
			c->moved = FF_MOVED_PARKED;
		} else {
			ff_ledger_moved(c->ledger, fds[0], FF_PATH_UNIX, 0, "moved-down", NULL);
			c->moved = FF_MOVED_PAIR;
		}
		c->shm = NULL;
		for (int i = 0; i < n; i++)
			ff_fd_reflag(fds[i]);
		ff_conn_forget_epregs(c);
		atomic_fetch_sub(&ff_shm_conns, 1);
		atomic_fetch_or(&sh->state, FF_SHM_CLOSED | FF_SHM_DOWN);
		ff_shm_put(sh);		/* the conn's reference; the caller still holds one */
	}
	ff_table_unlock();
	pthread_mutex_unlock(&sh->wait_mu);
	/* No fd left: the program closed them meanwhile, and the peer sees the end. */
	return n < 0 ? n : r;
}

/* ---- the two sides ---- */

static int move_down(int fd, struct ff_shm *sh)
{
	int sp[2], r;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp))
		return ff_shm_broken(sh, "no socketpair to move down to");
	room_for_ring(sp[0], sh);
	room_for_ring(sp[1], sh);
	r = hand_over_rx(fd, sh, sp[1]);
	if (!r)
		r = peer_consumer_out(fd, sh);
	if (!r)
		r = send_switch(fd, sh, sp[1]);
	ff_real.close(sp[1]);
	if (!r)
		r = flush_tx(sh, sp[0]);
	if (!r)
		r = install(sh, sp[0], 0);
	ff_real.close(sp[0]);
	return r;
}

static int adopt(int fd, struct ff_shm *sh)
{
	int y = -1, r = recv_switch(fd, sh, &y);

	if (r)
		return r;
	r = flush_tx(sh, y);
	if (!r)
		r = install(sh, y, 0);
	ff_real.close(y);
	return r;
}

/* Whether sock, a parked TCP socket, has the family the program's socket at fd had. */
static int park_family_ok(int fd, int sock)
{
	struct ff_slot *s;
	int fam = -1, want = -1;
	socklen_t l = sizeof(fam);

	if (!ff_is_socket(sock, SOCK_STREAM, 0) ||
	    ff_real.getsockopt(sock, SOL_SOCKET, SO_DOMAIN, &fam, &l))
		return 0;
	ff_table_lock();
	s = ff_fd_slot(fd);
	if (s && s->conn)
		want = s->conn->family;
	ff_table_unlock();
	return fam == want;
}

/*
 * Parking (docs/SHM.md, "Parking"): this end's TCP socket at the tuple,
 * from the agent, takes what it wrote that the peer has not read, once the
 * peer's consumer is out of that ring for good; the peer does the same
 * into its own socket, so no end hands the other anything. switch_by is
 * PARKED.
 */
static int park_with(int fd, struct ff_shm *sh, int sock)
{
	int r = park_family_ok(fd, sock) ? peer_consumer_out(fd, sh)
					 : ff_shm_broken(sh, "the parked socket's family is not the program's");

	if (!r)
		r = flush_tx(sh, sock);
	if (!r)
		r = install(sh, sock, 1);
	ff_real.close(sock);
	return r;
}

static int take_parked(int fd, struct ff_shm *sh)
{
	int sock = ff_shm_park_wait(sh, NULL);

	if (sock < 0)
		return ff_shm_broken(sh, "switch_by says parked, but this process got no socket for it");
	return park_with(fd, sh, sock);
}

/*
 * Table lock held: whether fd still is the connection of sh. The program
 * may close it in another thread, and its close forgets the slot under
 * this lock first: while it is held and this says yes, the number is
 * sh's, not a socket opened there since.
 */
static int at_locked(int fd, const struct ff_shm *sh)
{
	struct ff_slot *s = ff_fd_slot(fd);

	return s && s->conn && s->conn->shm == sh;
}

static int still_at(int fd, const struct ff_shm *sh)
{
	int at;

	ff_table_lock();
	at = at_locked(fd, sh);
	ff_table_unlock();
	return at;
}

/* Both ring locks held. */
static int switch_locked(int fd, struct ff_shm *sh)
{
	unsigned st = atomic_load(&sh->state);
	uint32_t by = 0;

	if ((st & FF_SHM_CLOSED) || !still_at(fd, sh))
		return 0;		/* moved down by another thread, or closed */
	if (st & FF_SHM_BROKEN)
		return -ECONNRESET;
	if (atomic_compare_exchange_strong(sh->switch_by, &by, sh->role)) {
		/* Against the peer's producer: its head store, fence, switch_by load. */
		atomic_thread_fence(memory_order_seq_cst);
		return move_down(fd, sh);
	}
	if (by == FF_SHM_PARKED) {
		ff_debug("fd %d: its peer parked it; parking this end at the program's call", fd);
		return take_parked(fd, sh);
	}
	if (by == peer_role(sh))
		return adopt(fd, sh);
	return ff_shm_broken(sh, by == sh->role ? "switch_by names this end, which did not move down"
						: "switch_by holds neither role");
}

/*
 * Both ring locks held: a failed move down or park breaks the connection
 * and shuts fd down, so the peer's threads asleep on the bell see the end;
 * only while fd is still it: a failed move of a connection the program
 * closed meanwhile shut down the socket it opened at the number since (a
 * listener: its clients got ECONNREFUSED).
 */
static void failed(int fd, struct ff_shm *sh, const char *what)
{
	ff_shm_broken(sh, what);
	ff_table_lock();
	if (at_locked(fd, sh))
		ff_real.shutdown(fd, SHUT_RDWR);
	ff_table_unlock();
}

/* The system calls made on the way leave errno as the caller had it (core.h). */
int ff_shm_switch(int fd)
{
	struct ff_shm *sh = ff_shm_get(fd);
	int r, err = errno;

	if (!sh)
		return 0;
	pthread_mutex_lock(&sh->rx.mu);
	pthread_mutex_lock(&sh->tx.mu);
	r = switch_locked(fd, sh);
	if (r < 0)
		failed(fd, sh, "moving down failed");
	pthread_mutex_unlock(&sh->tx.mu);
	pthread_mutex_unlock(&sh->rx.mu);
	ff_shm_put(sh);
	errno = err;
	return r;
}

/* Whether the peer shut its end or is gone: what it wrote last is in ring B->A only. */
static int peer_closed(int fd, struct ff_shm *sh)
{
	return atomic_load_explicit(sh->rx.prod_shut, memory_order_acquire) || peer_gone(fd);
}

/*
 * The parking thread's (shm/park.c): park the connection of sh at fd on
 * the socket ff_shm_park_wait gives it. 0 once done or if it is no longer
 * there (closed, or parked by a thread of the program meanwhile); -EBUSY
 * while its peer moves it down; -EPIPE, nothing changed, if the peer
 * closed its end (the bytes it wrote last are in the ring only: its
 * parking could not move them, docs/SHM.md); -ENOENT, nothing changed,
 * with adopt (the peer's end, told after it parked) if the peer did not
 * park it; or another -errno.
 */
int ff_shm_park(int fd, struct ff_shm *sh, int adopt)
{
	unsigned st;
	uint32_t by = 0;
	int r = 0;

	pthread_mutex_lock(&sh->rx.mu);
	pthread_mutex_lock(&sh->tx.mu);
	st = atomic_load(&sh->state);
	if (st & FF_SHM_BROKEN) {
		r = -ECONNRESET;
	} else if (!(st & FF_SHM_CLOSED) && still_at(fd, sh)) {
		by = atomic_load(sh->switch_by);
		if (by == 0 && (adopt || peer_closed(fd, sh))) {
			r = adopt ? -ENOENT : -EPIPE;
		} else if (by == 0 && atomic_compare_exchange_strong(sh->switch_by, &by, FF_SHM_PARKED)) {
			/*
			 * Against the peer's close (ff_shm_closing): its prod_shut
			 * store, fence, switch_by load. Closed before it saw
			 * PARKED, it left its last bytes in the ring: fail loudly.
			 */
			atomic_thread_fence(memory_order_seq_cst);
			r = peer_closed(fd, sh) ? -ECONNRESET : take_parked(fd, sh);
		} else {
			/* Parked by the peer (before, or as the CAS failed), or moved down by it. */
			r = by == FF_SHM_PARKED ? take_parked(fd, sh) : -EBUSY;
		}
		if (r < 0 && r != -EBUSY && r != -EPIPE && r != -ENOENT)
			failed(fd, sh, "parking failed");
	}
	pthread_mutex_unlock(&sh->tx.mu);
	pthread_mutex_unlock(&sh->rx.mu);
	return r;
}

/*
 * The program let go of an shm connection (its last fd is closed; the
 * conn is freed next): it will write no more (prod_shut, then a fence, as
 * the mover's CAS is followed by one), and if its peer parked it, what it
 * wrote that the peer has not read goes into this end's parked socket,
 * then the socket closes: the peer reads it all, then EOF.
 */
void ff_shm_closing(struct ff_shm *sh, const struct ff_ends *ends)
{
	int sock;

	pthread_mutex_lock(&sh->rx.mu);
	pthread_mutex_lock(&sh->tx.mu);
	atomic_store_explicit(sh->tx.prod_shut, 1, memory_order_release);
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load(sh->switch_by) == FF_SHM_PARKED &&
	    !(atomic_load(&sh->state) & (FF_SHM_CLOSED | FF_SHM_BROKEN)) &&
	    (sock = ff_shm_park_wait(sh, ends)) >= 0) {
		if (!peer_consumer_out(-1, sh))
			flush_tx(sh, sock);
		ff_real.close(sock);
	}
	pthread_mutex_unlock(&sh->tx.mu);
	pthread_mutex_unlock(&sh->rx.mu);
}

/*
 * Table lock held: fds to move down now (not broken; with
 * FF_SHM_SWITCH_KEPT only those without FD_CLOEXEC), at most SCAN_MAX.
 */
static int to_move(unsigned how, int *fds)
{
	int hw = ff_table_hiwater(), n = 0;

	for (int fd = 0; fd <= hw && n < SCAN_MAX; fd++) {
		struct ff_slot *s = ff_fd_slot(fd);

		if (!(atomic_load_explicit(&s->flags, memory_order_relaxed) & FF_FD_SHM) ||
		    !s->conn || !s->conn->shm ||
		    (atomic_load(&s->conn->shm->state) & FF_SHM_BROKEN))
			continue;
		if ((how & FF_SHM_SWITCH_KEPT) && (ff_real.fcntl(fd, F_GETFD) & FD_CLOEXEC))
			continue;
		fds[n++] = fd;
	}
	return n;
}

/*
 * Scan, then move down outside the table lock; until a scan finds nothing,
 * so that a connection another thread finished meanwhile is not missed.
 * A failed move breaks its connection, which the next scan skips.
 */
void ff_shm_switch_all(unsigned how)
{
	int fds[SCAN_MAX], n, err = errno;

	for (;;) {
		ff_table_lock();
		/* A socket pair going back onto shm: once it is done, its fds are scanned too. */
		if (ff_resume_busy()) {
			ff_table_wait();
			ff_table_unlock();
			continue;
		}
		/* No shm connection (counted before it is installed, under this lock): no scan. */
		n = atomic_load(&ff_shm_conns) ? to_move(how, fds) : 0;
		if (!n)
			break;
		ff_table_unlock();
		for (int i = 0; i < n; i++)
			ff_shm_switch(fds[i]);
	}
	/* The other process may hold the pairs now: none goes back to shm for a while. */
	ff_resume_shared();
	if (!(how & FF_SHM_SWITCH_LOCK))
		ff_table_unlock();
	errno = err;
}

void ff_shm_switch_passed(const struct msghdr *mh)
{
	const uint8_t *end = (const uint8_t *)mh->msg_control + mh->msg_controllen;

	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR((struct msghdr *)mh, c)) {
		/* A header the kernel would refuse (EINVAL) is left to it. */
		if (c->cmsg_len < CMSG_LEN(0) || c->cmsg_len > (size_t)(end - (const uint8_t *)c))
			break;
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			struct ff_slot *s;
			int fd;

			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			ff_resume_passing(fd);
			s = ff_fd_slot(fd);
			if (s && (atomic_load_explicit(&s->flags, memory_order_relaxed) & FF_FD_SHM))
				ff_shm_switch(fd);
		}
	}
}
