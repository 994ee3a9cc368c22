/* SPDX-License-Identifier: MIT */
/*
 * The data path on a shared-memory connection: what read/write/send/recv/
 * ...msg/sendfile/ioctl/shutdown do when the fd's slot has FF_FD_SHM. The
 * rings, waiting and waking are in shm/ring.c.
 *
 * The program must not be able to tell this from TCP except by speed:
 *  - a byte stream: a read returns what is there (at least one byte; all of
 *    it with MSG_WAITALL), a blocking write returns once everything is in
 *    the ring, publishing head after FIRST_CHUNK bytes, then in pieces
 *    doubling up to CHUNK, so the reader starts copying out while the
 *    writer still copies in;
 *  - O_NONBLOCK and MSG_DONTWAIT give EAGAIN instead of waiting;
 *    SO_RCVTIMEO/SO_SNDTIMEO (read from the bell socket, where setsockopt
 *    put them, only when about to sleep) give EAGAIN after the timeout; a
 *    signal gives EINTR, or restarts the wait as SA_RESTART would (when no
 *    timeout is set and every handler that could have interrupted it has
 *    SA_RESTART: ff_signal_restarts);
 *  - what a call has moved is returned even if it then fails; the error
 *    comes with the next call, as with TCP;
 *  - end of stream: 0 once the ring is empty and the peer shut down or
 *    left; EPIPE (and SIGPIPE unless MSG_NOSIGNAL) for writing after our
 *    SHUT_WR or to a peer that closed or left; ECONNRESET when the peer
 *    broke the contract.
 * O_NONBLOCK is cached in the connection (set at attach, kept by the
 * fcntl/ioctl wrappers) so a blocking call pays no system call before it
 * spins; before it sleeps it asks the kernel, in case the flag was changed
 * behind the shim's back.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/sockios.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "shm/shm.h"

/*
 * A large write to a reader that is looking (not asleep) is published
 * after its first FIRST_CHUNK bytes, then in pieces doubling up to CHUNK:
 * the reader starts copying out after 8 KiB, not 64 (docs/SHM.md,
 * "Publishing"). A reader asleep gets CHUNK pieces, each published piece
 * costing it a bell while it is waking. Reads take at most CHUNK at a
 * time, so the writer gets room back as they go.
 */
#define FIRST_CHUNK	(8u << 10)
#define CHUNK		(64u << 10)
/* Internal: the peer moved the connection down; the caller adopts (no lock held). */
#define PEER_SWITCHED	(-4096 - 2)

/* ---- where the bytes go or come from ---- */

struct cursor {
	const struct iovec *iov;
	int i;
	size_t off;		/* into iov[i] */
	size_t left;		/* bytes still wanted */
};

static int cursor_init(struct cursor *c, const struct iovec *iov, int cnt)
{
	size_t total = 0;

	if (cnt < 0 || cnt > IOV_MAX || (cnt && !iov))
		return -EINVAL;
	for (int i = 0; i < cnt; i++) {
		if (iov[i].iov_len > (size_t)SSIZE_MAX - total)
			return -EINVAL;
		total += iov[i].iov_len;
	}
	*c = (struct cursor){ .iov = iov, .left = total };
	return 0;
}

/* Copy n bytes between p and the cursor: into p (to_ring) or out of it. NULL p: skip. */
static void cursor_copy(struct cursor *c, uint8_t *p, size_t n, int to_ring)
{
	c->left -= n;
	while (n) {
		const struct iovec *v = &c->iov[c->i];
		size_t k = v->iov_len - c->off;

		if (k > n)
			k = n;
		if (p && to_ring)
			ff_shm_copy(p, (uint8_t *)v->iov_base + c->off, k);
		else if (p)
			ff_shm_copy((uint8_t *)v->iov_base + c->off, p, k);
		if (p)
			p += k;
		n -= k;
		c->off += k;
		if (c->off == v->iov_len) {
			c->i++;
			c->off = 0;
		}
	}
}

/* Where a send's bytes come from: memory, or a file read straight into the ring. */
struct source {
	struct cursor *mem;
	int in;
	off_t *off;
	size_t left;
	int eof;		/* the file ended */
};

/* Fill p with up to n bytes: the count (short only at the file's end), or -errno. */
static ssize_t source_fill(struct source *s, uint8_t *p, size_t n)
{
	ssize_t r;

	if (s->mem) {
		cursor_copy(s->mem, p, n, 1);
		s->left -= n;
		return (ssize_t)n;
	}
	r = s->off ? pread(s->in, p, n, *s->off) : ff_real.read(s->in, p, n);
	if (r < 0)
		return -errno;
	if (s->off)
		*s->off += r;
	s->left -= (size_t)r;
	s->eof = (size_t)r < n;
	return r;
}

/* ---- blocking ---- */

/* One call's waiting state: the timeout is read at its first sleep. */
struct blocking {
	int spun;
	int known;		/* end/forever set */
	int forever;
	int64_t end_ms;
};

static void read_timeout(int fd, int opt, struct blocking *b)
{
	struct timeval tv = { 0 };
	socklen_t len = sizeof(tv);

	b->known = 1;
	b->forever = ff_real.getsockopt(fd, SOL_SOCKET, opt, &tv, &len) ||
		     (tv.tv_sec == 0 && tv.tv_usec == 0);
	b->end_ms = ff_now_ms() + (int64_t)tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000;
}

/* O_NONBLOCK as the kernel has it (set by a raw system call, say): the cache learns it. */
static int kernel_nonblocking(int fd, struct ff_shm *sh)
{
	int fl = ff_real.fcntl(fd, F_GETFL);

	if (fl < 0 || !(fl & O_NONBLOCK))
		return 0;
	atomic_store_explicit(&sh->nonblock, 1, memory_order_relaxed);
	return 1;
}

/* Wait for dir on a call: 0 to try again, -EAGAIN (would block, timed out) or -EINTR. */
static int block(int fd, struct ff_shm *sh, unsigned dir, int flags, struct blocking *b)
{
	int ms = -1, r;

	if ((flags & MSG_DONTWAIT) || atomic_load_explicit(&sh->nonblock, memory_order_relaxed))
		return -EAGAIN;
	if (!b->spun) {
		b->spun = 1;
		if (ff_shm_spin(sh, dir))
			return 0;
	}
	/* About to sleep: now ask the kernel what the cache may have missed. */
	if (!b->known) {
		if (kernel_nonblocking(fd, sh))
			return -EAGAIN;
		read_timeout(fd, dir == POLLIN ? SO_RCVTIMEO : SO_SNDTIMEO, b);
	}
	if (!b->forever) {
		int64_t left = b->end_ms - ff_now_ms();

		if (left <= 0)
			return -EAGAIN;
		ms = left > INT_MAX ? INT_MAX : (int)left;
	}
	r = ff_shm_wait(fd, sh, dir, ms);
	if (r == -ETIMEDOUT)
		return 0;	/* the loop finds the deadline passed */
	if (r == -EINTR && b->forever && ff_signal_restarts())
		return 0;
	return r;
}

/* ---- moving bytes ---- */

/*
 * Whether the connection was moved down, and where a call goes then: 0 (not
 * moved), FF_SHM_MOVED (by us, in another thread), PEER_SWITCHED, or an error.
 */
static ssize_t switched(struct ff_shm *sh)
{
	int by = ff_shm_switched_by(sh);

	if (by <= 0)
		return by;
	if (by != (int)sh->role)
		return PEER_SWITCHED;
	/* Our move holds the ring lock the caller holds: done, or the peer wrote our role. */
	if (atomic_load_explicit(&sh->state, memory_order_relaxed) & FF_SHM_DOWN)
		return FF_SHM_MOVED;
	return ff_shm_broken(sh, "switch_by names this end, which did not move down");
}

/* Adopt the peer's switch: the fd becomes a kernel socket, the call goes there. */
static ssize_t adopt(int fd, struct ff_shm *sh)
{
	int r = ff_shm_switch(fd);

	return r < 0 ? ff_shm_broken(sh, "the peer's switch could not be adopted") : FF_SHM_MOVED;
}

/* rx: the stream has ended once rx is empty. Checked before the last look at head. */
static int rx_ended(struct ff_shm *sh)
{
	return ff_shm_rx_shut(sh) ||
	       (atomic_load_explicit(&sh->state, memory_order_relaxed) & FF_SHM_SHUT_RD);
}

/*
 * rx.mu held, nothing moved: the stream has ended if the ring is empty
 * after the end was seen; a move down by the peer (which also ends its
 * bell socket) takes precedence. 1 ended, 0 not, or a negative code.
 */
static ssize_t rx_check_end(struct ff_shm *sh)
{
	ssize_t sw;
	int64_t avail;

	if (!rx_ended(sh))
		return 0;
	if ((sw = switched(sh)))
		return sw;
	avail = ff_shm_rx_avail(sh);
	return avail < 0 ? avail : avail == 0;
}

/* Copy n bytes of rx from stream index i to the cursor (p NULL: drop). */
static void rx_copy(struct ff_shm *sh, uint64_t i, struct cursor *c, size_t n, int drop)
{
	while (n) {
		uint8_t *p;
		size_t k = ff_shm_seg(sh, &sh->rx, i, n, &p);

		cursor_copy(c, drop ? NULL : p, k, 0);
		i += k;
		n -= k;
	}
}

/*
 * Take bytes out of rx into c (MSG_TRUNC: drop them). The consumer's side
 * of a move down (docs/SHM.md): cons_busy is set and fenced before
 * switch_by is looked at, so either we see the switch or the switching end
 * waits for this copy to finish. Returns the bytes taken; 0 with *ended
 * set or not; or a negative code.
 */
static ssize_t rx_take(int fd, struct ff_shm *sh, struct cursor *c, int flags, int *ended)
{
	struct ff_shm_ring *r = &sh->rx;
	ssize_t taken = 0, ret = 0;

	pthread_mutex_lock(&r->mu);
	atomic_store_explicit(r->cons_busy, 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(&sh->state, memory_order_relaxed) & FF_SHM_BROKEN)
		ret = -ECONNRESET;
	else
		ret = switched(sh);
	while (!ret && c->left) {
		int64_t avail = ff_shm_rx_avail(sh);
		size_t k;

		if (avail <= 0) {
			ret = avail;
			break;
		}
		k = (size_t)avail < c->left ? (size_t)avail : c->left;
		if (k > CHUNK)
			k = CHUNK;
		rx_copy(sh, atomic_load_explicit(&r->mine, memory_order_relaxed), c, k,
			flags & MSG_TRUNC);
		ff_shm_rx_consumed(fd, sh, k);
		taken += (ssize_t)k;
	}
	atomic_store_explicit(r->cons_busy, 0, memory_order_release);
	*ended = 0;
	if (!ret && !taken && c->left) {
		ret = rx_check_end(sh);
		*ended = ret == 1;
		ret = ret == 1 ? 0 : ret;
	}
	pthread_mutex_unlock(&r->mu);
	return taken ? taken : ret;
}

/*
 * MSG_PEEK: copy without taking (MSG_TRUNC: only count), once need bytes
 * are there (MSG_WAITALL: the whole length, up to what any writer lets in)
 * or the stream ended.
 */
static ssize_t rx_peek(struct ff_shm *sh, struct cursor *c, int flags, size_t need, int *ended)
{
	struct ff_shm_ring *r = &sh->rx;
	ssize_t ret = 0;
	int64_t avail;
	int end;

	pthread_mutex_lock(&r->mu);
	*ended = 0;
	end = rx_ended(sh);
	if (atomic_load_explicit(&sh->state, memory_order_relaxed) & FF_SHM_BROKEN)
		ret = -ECONNRESET;
	else
		ret = switched(sh);
	if (!ret) {
		avail = ff_shm_rx_avail(sh);
		if (avail < 0) {
			ret = avail;
		} else if ((size_t)avail >= need || end) {
			size_t k = (size_t)avail < c->left ? (size_t)avail : c->left;

			rx_copy(sh, atomic_load_explicit(&r->mine, memory_order_relaxed), c, k,
				flags & MSG_TRUNC);
			ret = (ssize_t)k;
			*ended = k == 0;
		}
	}
	pthread_mutex_unlock(&r->mu);
	return ret;
}

/* What a MSG_WAITALL peek of left bytes waits for: all, up to FF_SHM_KEEP and our cap. */
static size_t peek_need(const struct ff_shm *sh, size_t left)
{
	uint64_t most = sh->cap < FF_SHM_KEEP ? sh->cap : FF_SHM_KEEP;

	return left < most ? left : (size_t)most;
}

ssize_t ff_shm_recv(int fd, const struct iovec *iov, int cnt, int flags)
{
	struct blocking b = { 0 };
	struct cursor c;
	struct ff_shm *sh;
	ssize_t got = 0, r;
	size_t need;
	int ended = 0;

	if (flags & MSG_OOB)
		return -EINVAL;		/* TCP without urgent data */
	if (flags & MSG_ERRQUEUE)
		return -EAGAIN;		/* nothing is ever queued there */
	r = cursor_init(&c, iov, cnt);
	if (r)
		return r;
	sh = ff_shm_get(fd);
	if (!sh)
		return FF_SHM_MOVED;
	/*
	 * MSG_WAITALL peeks wait for no more than any writer lets into the
	 * ring: our cap comes from our own netns's wmem_max, the writer's
	 * may be smaller, but every writer holds FF_SHM_KEEP.
	 */
	need = !(flags & MSG_WAITALL) ? 1 : peek_need(sh, c.left);
	for (;;) {
		if (flags & MSG_PEEK)
			r = rx_peek(sh, &c, flags, need, &ended);
		else
			r = rx_take(fd, sh, &c, flags, &ended);
		if (r == PEER_SWITCHED)
			r = adopt(fd, sh);
		if (r < 0)
			break;
		got += r;
		if (!c.left || ended || (r && (flags & MSG_PEEK)) || (got && !(flags & MSG_WAITALL)))
			break;
		r = block(fd, sh, POLLIN, flags, &b);
		if (r < 0)
			break;
	}
	ff_shm_put(sh);
	return got ? got : r;
}

/* tx_closed's answer when the write goes nowhere (gone_write). */
#define WRITE_INTO_RESET	1

/* tx.mu held: why nothing may be written now (0: it may; WRITE_INTO_RESET). */
static ssize_t tx_closed(struct ff_shm *sh)
{
	unsigned st = atomic_load_explicit(&sh->state, memory_order_relaxed);
	ssize_t sw;

	if (st & FF_SHM_BROKEN)
		return -ECONNRESET;
	if ((sw = switched(sh)))
		return sw;
	if (st & FF_SHM_SHUT_WR)
		return -EPIPE;
	if ((st & FF_SHM_PEER_GONE) ||
	    atomic_load_explicit(sh->tx.cons_closed, memory_order_acquire)) {
		/* A peer that moved down also closes its bell socket: that is no EPIPE. */
		if ((sw = switched(sh)))
			return sw;
		/*
		 * TCP takes the first write to a peer that closed having read
		 * everything (its kernel answers with a reset) and fails the
		 * next; a peer that left bytes unread reset at once.
		 */
		if (!(atomic_fetch_or(&sh->state, FF_SHM_PEER_RESET) & FF_SHM_PEER_RESET) &&
		    atomic_load_explicit(sh->tx.tail, memory_order_acquire) ==
		    atomic_load_explicit(&sh->tx.mine, memory_order_relaxed))
			return WRITE_INTO_RESET;
		return -EPIPE;
	}
	return 0;
}

/* The write TCP takes after the peer closed: s's bytes are used up and go nowhere. */
static ssize_t gone_write(struct source *s)
{
	static __thread uint8_t sink[4096];
	ssize_t done = 0;

	while (s->left && !s->eof) {
		ssize_t n = source_fill(s, sink, s->left < sizeof(sink) ? s->left : sizeof(sink));

		if (n < 0)
			return done ? done : n;
		done += n;
	}
	return done;
}

/* Put what fits of s into tx, publishing in growing pieces. The bytes put, or a negative code. */
static ssize_t tx_put(int fd, struct ff_shm *sh, struct source *s)
{
	struct ff_shm_ring *r = &sh->tx;
	ssize_t put = 0, ret;
	size_t chunk = atomic_load_explicit(r->cons_wait, memory_order_relaxed) ? CHUNK : FIRST_CHUNK;

	pthread_mutex_lock(&r->mu);
	ret = tx_closed(sh);
	if (ret == WRITE_INTO_RESET) {
		ret = gone_write(s);
		pthread_mutex_unlock(&r->mu);
		return ret;
	}
	while (!ret && s->left && !s->eof) {
		int64_t room = ff_shm_tx_room(sh);
		uint64_t i = atomic_load_explicit(&r->mine, memory_order_relaxed);
		size_t k, done = 0;

		if (room <= 0) {
			ret = room;
			break;
		}
		k = (size_t)room < s->left ? (size_t)room : s->left;
		if (k > chunk)
			k = chunk;
		if (chunk < CHUNK)
			chunk *= 2;
		if ((ret = ff_shm_tx_claim(sh, i, &k)) || !k)
			break;
		while (done < k && !s->eof) {
			uint8_t *p;
			size_t seg = ff_shm_seg(sh, r, i + done, k - done, &p);
			ssize_t n = source_fill(s, p, seg);

			if (n < 0) {
				ret = n;
				break;
			}
			done += (size_t)n;
		}
		if (done || r->spilling)	/* also gives a claim back */
			ff_shm_tx_produced(fd, sh, done);
		put += (ssize_t)done;
		/* Moved down meanwhile: put no more here (the caller adopts, below). */
		if (atomic_load_explicit(sh->switch_by, memory_order_relaxed))
			break;
	}
	pthread_mutex_unlock(&r->mu);
	return put ? put : ret;
}

static ssize_t send_from(int fd, struct source *s, int flags)
{
	struct blocking b = { 0 };
	struct ff_shm *sh = ff_shm_get(fd);
	ssize_t sent = 0, r;

	if (!sh)
		return FF_SHM_MOVED;
	for (;;) {
		r = tx_put(fd, sh, s);
		if (r == PEER_SWITCHED)
			r = adopt(fd, sh);
		if (r < 0)
			break;
		sent += r;
		if (!s->left || s->eof)
			break;
		r = block(fd, sh, POLLOUT, flags, &b);
		if (r < 0)
			break;
	}
	/*
	 * The peer moved down after our last head (tx_produced's fence, then
	 * this load): its move may not have seen those bytes, so we move them,
	 * before returning (docs/SHM.md, "Moving down").
	 */
	if (sent && atomic_load_explicit(sh->switch_by, memory_order_relaxed))
		ff_shm_switch(fd);
	ff_shm_put(sh);
	if (sent)
		return sent;
	if (r == -EPIPE && !(flags & MSG_NOSIGNAL))
		raise(SIGPIPE);
	return r;
}

ssize_t ff_shm_send(int fd, const struct iovec *iov, int cnt, int flags)
{
	struct cursor c;
	struct source s = { .mem = &c };
	int r = cursor_init(&c, iov, cnt);

	if (r)
		return r;
	if (flags & MSG_OOB)
		return -EOPNOTSUPP;	/* no urgent data on this channel */
	s.left = c.left;
	return send_from(fd, &s, flags);
}

ssize_t ff_shm_sendfile(int out_fd, int in_fd, off_t *off, size_t n)
{
	struct source s = { .in = in_fd, .off = off, .left = n };

	if (n > (size_t)SSIZE_MAX)
		s.left = SSIZE_MAX;
	return send_from(out_fd, &s, 0);
}

/* ---- control ---- */

int ff_shm_ioctl(int fd, unsigned long req, int *val)
{
	struct ff_shm *sh = ff_shm_get(fd);
	int64_t n = 0;

	if (!sh)
		return FF_SHM_MOVED;
	if (req == FIONREAD) {
		pthread_mutex_lock(&sh->rx.mu);
		n = ff_shm_rx_avail(sh);
		pthread_mutex_unlock(&sh->rx.mu);
	} else if (req == SIOCOUTQ || req == SIOCOUTQNSD) {
		pthread_mutex_lock(&sh->tx.mu);
		n = ff_shm_tx_room(sh);
		pthread_mutex_unlock(&sh->tx.mu);
		if (n >= 0)
			n = (int64_t)sh->cap - n;
	}
	/* SIOCATMARK: never at an urgent mark, there is no urgent data. */
	ff_shm_put(sh);
	if (n < 0)
		return (int)n;
	*val = n > INT_MAX ? INT_MAX : (int)n;
	return 0;
}

/*
 * SHUT_WR: prod_shut is a producer's store, ordered after the last head
 * (release) and followed by the producer's fence-and-ring, so a reader
 * asleep on the bell wakes and sees the end. SHUT_RD is local, as in TCP.
 */
int ff_shm_shutdown(int fd, int how)
{
	struct ff_shm *sh;

	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return -EINVAL;
	sh = ff_shm_get(fd);
	if (!sh)
		return FF_SHM_MOVED;
	if (how != SHUT_WR)
		atomic_fetch_or(&sh->state, FF_SHM_SHUT_RD);
	if (how != SHUT_RD) {
		pthread_mutex_lock(&sh->tx.mu);
		atomic_fetch_or(&sh->state, FF_SHM_SHUT_WR);
		atomic_store_explicit(sh->tx.prod_shut, 1, memory_order_release);
		ff_shm_tx_produced(fd, sh, 0);
		pthread_mutex_unlock(&sh->tx.mu);
		/* As after a write (send_from): the peer's move may not have seen prod_shut. */
		if (atomic_load_explicit(sh->switch_by, memory_order_relaxed))
			ff_shm_switch(fd);
	}
	ff_shm_put(sh);
	return 0;
}
