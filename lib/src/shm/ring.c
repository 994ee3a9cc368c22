/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory rings: attach, the indices, waiting and waking, and
 * readiness (docs/SHM.md is the contract; shm.h the interface).
 *
 * Trust (docs/SHM.md, "Trusting nothing the peer writes"): the peer can
 * write anything into the mapping at any time. magic, version and
 * ring_size are checked at attach and copied; the indices we own are kept
 * in our own memory (ring.mine) and only published; the peer's index is
 * accepted only if it moved forward by no more than is possible
 * (ff_shm_rx_avail, ff_shm_tx_room); every offset is (index - base) &
 * (size - 1) (ff_shm_seg). No value the peer writes makes us touch memory
 * outside the mapping.
 *
 * Memory ordering (docs/SHM.md, "Waiting and waking"): head and tail are
 * stored with release after the copy and loaded with acquire before it;
 * prod_shut is stored after the last head and loaded before the last look
 * at it. Sleeping is Dekker's pattern (flag, full fence, re-check against
 * index, full fence, load the flag): a wake-up is never lost.
 *
 * Several threads of this process: each direction has its own mutex, none
 * held across a sleep. The process counts its armed waiters under wait_mu:
 * only the first sets a wait flag, only the last clears it and drains the
 * bells; a thread that woke for nothing while others were armed steps back
 * (unarmed) until their drain or 1 ms.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"
#include "shm/shm.h"

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
	       "the rings need lock-free 32- and 64-bit atomics shared between processes");
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "docs/SHM.md fixes the layout as little-endian"
#endif

/* Default spin before sleeping: lib/README.md, "Shared memory", has the measurement. */
#define SPIN_DEFAULT_US		20
/* A producer waiting for room is woken once this much is free (as TCP waits for wspace). */
#define ROOM_WAKE(sh)		((sh)->cap / 4)
/* A waiter that woke for nothing while others were armed waits this long for their drain. */
#define STEP_BACK_NS		1000000L
/*
 * A producer that must write past FF_SHM_KEEP while the peer gives those
 * pages back (one madvise) looks again every SPILL_POLL_NS, for at most
 * SPILL_WAIT_NS under tx.mu, then returns to wait as for room (so a
 * nonblocking send gets EAGAIN).
 */
#define SPILL_POLL_NS		50000L
#define SPILL_WAIT_NS		1000000L

long ff_shm_spin_ns = SPIN_DEFAULT_US * 1000L;

/*
 * Payload a socket buffer at its largest (twice net.core.wmem_max) takes:
 * 7/8 of it leaves room for the kernel's per-skb overhead (an AF_UNIX pair
 * written in 16 KiB pieces takes 96% of its buffer). Stock wmem_max: 364 KiB.
 */
#define MOVABLE(wmem_max)	((uint64_t)(wmem_max) * 2 / 8 * 7)
static uint64_t movable = MOVABLE(212992);

/*
 * Moving down puts a ring's unread bytes into a socket pair's buffer
 * (shm/switch.c), which the kernel caps at twice net.core.wmem_max for an
 * unprivileged process. A ring never holds more unread than that, so a
 * move never waits for a reader (who may be this very process, in fork):
 * read once, the same on both ends of a channel (one host, one sysctl).
 */
static void read_wmem_max(void)
{
	char buf[32];
	int fd = ff_real.open("/proc/sys/net/core/wmem_max", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : ff_real.read(fd, buf, sizeof(buf) - 1);
	long long v;

	if (fd >= 0)
		ff_real.close(fd);
	if (n <= 0)
		return;
	buf[n] = 0;
	v = strtoll(buf, NULL, 10);
	if (v > 0 && v <= INT_MAX)
		movable = MOVABLE(v);
}

uint64_t ff_shm_cap(uint64_t ring_size)
{
	return ring_size < movable ? ring_size : movable;
}

void ff_shm_init(void)
{
	const char *v = getenv("FREEFLOW_SHM_SPIN_US");
	char *end;
	long us;

	read_wmem_max();
	if (!v || !*v)
		return;
	us = strtol(v, &end, 10);
	if (*end || us < 0 || us > 1000000) {
		ff_debug("FREEFLOW_SHM_SPIN_US=%s is not 0..1000000 microseconds; spinning %d us",
			 v, SPIN_DEFAULT_US);
		return;
	}
	ff_shm_spin_ns = us * 1000L;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* ---- attach and lifetime ---- */

static uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The header of memfd, checked against its seals and size: ring_size, or -errno. */
static int64_t check_memfd(int memfd, const char **why)
{
	const int need = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
	int seals = ff_real.fcntl(memfd, F_GET_SEALS);
	uint8_t hdr[16];
	struct stat st;
	uint32_t ring;

	if (seals < 0 || (seals & need) != need) {
		*why = "the memfd is not sealed against shrinking, growing and resealing";
		return -EPERM;
	}
	if (fstat(memfd, &st) || !S_ISREG(st.st_mode)) {
		*why = "the memfd cannot be examined";
		return -EINVAL;
	}
	if (pread(memfd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr)) {
		*why = "the memfd's header cannot be read";
		return -EINVAL;
	}
	ring = get_le32(hdr + 8);
	if (get_le32(hdr) != FF_SHM_MAGIC || get_le32(hdr + 4) != FF_SHM_VERSION) {
		*why = "the memfd's magic or layout version is not FFSM 2";
		return -EPROTO;
	}
	if (ring < FF_SHM_RING_MIN || ring > FF_SHM_RING_MAX || (ring & (ring - 1))) {
		*why = "ring_size is not a power of two from 4 KiB to 16 MiB";
		return -EPROTO;
	}
	if ((uint64_t)st.st_size != FF_SHM_HDR_SIZE + 2 * (uint64_t)ring) {
		*why = "the memfd's size is not 4096 + 2 * ring_size";
		return -EPROTO;
	}
	return ring;
}

static void ring_init(struct ff_shm_ring *r, uint8_t *ctl, uint8_t *data)
{
	r->head = (_Atomic uint64_t *)(void *)(ctl + FF_SHM_CTL_HEAD);
	r->tail = (_Atomic uint64_t *)(void *)(ctl + FF_SHM_CTL_TAIL);
	r->cons_wait = (_Atomic uint32_t *)(void *)(ctl + FF_SHM_CTL_CONS_WAIT);
	r->prod_wait = (_Atomic uint32_t *)(void *)(ctl + FF_SHM_CTL_PROD_WAIT);
	r->cons_busy = (_Atomic uint32_t *)(void *)(ctl + FF_SHM_CTL_CONS_BUSY);
	r->prod_shut = (_Atomic uint32_t *)(void *)(ctl + FF_SHM_CTL_PROD_SHUT);
	r->cons_closed = (_Atomic uint32_t *)(void *)(ctl + FF_SHM_CTL_CONS_CLOSED);
	r->spill = (_Atomic uint32_t *)(void *)(ctl + FF_SHM_CTL_SPILL);
	r->base = (_Atomic uint64_t *)(void *)(ctl + FF_SHM_CTL_BASE);
	r->data = data;
	r->org = 0;
	r->spilling = 0;
	pthread_mutex_init(&r->mu, NULL);
	atomic_init(&r->mine, 0);
	atomic_init(&r->theirs, 0);
	r->waiters = 0;
}

/* A conn's view of mapping m (whose reference it takes) for role: 0 with *out, or -ENOMEM. */
static int view(struct ff_shm_map *m, enum ff_shm_role role, struct ff_shm **out)
{
	struct ff_shm *sh = calloc(1, sizeof(*sh));
	uint8_t *d0, *d1;

	if (!sh)
		return -ENOMEM;
	atomic_init(&sh->refs, 1);
	atomic_init(&sh->state, 0);
	sh->map = m;
	sh->base = m->base;
	sh->size = m->ring;
	sh->cap = ff_shm_cap(m->ring);
	sh->role = role;
	sh->pid = getpid();
	sh->switch_by = ff_shm_word(sh, FF_SHM_OFF_SWITCH_BY);
	d0 = m->base + FF_SHM_HDR_SIZE;
	d1 = d0 + m->ring;
	/* The connector produces into ring 0. */
	if (role == FF_SHM_CONNECTOR) {
		ring_init(&sh->tx, m->base + FF_SHM_OFF_CTL0, d0);
		ring_init(&sh->rx, m->base + FF_SHM_OFF_CTL1, d1);
	} else {
		ring_init(&sh->tx, m->base + FF_SHM_OFF_CTL1, d1);
		ring_init(&sh->rx, m->base + FF_SHM_OFF_CTL0, d0);
	}
	pthread_mutex_init(&sh->wait_mu, NULL);
	ff_cond_init_monotonic(&sh->drained);
	*out = sh;
	return 0;
}

/* Map memfd, whose rings are ring bytes, for role: 0 with *out, or -ENOMEM. */
static int map_memfd(int memfd, uint32_t ring, enum ff_shm_role role, struct ff_shm **out)
{
	struct ff_shm_map *m = calloc(1, sizeof(*m));

	if (!m)
		return -ENOMEM;
	/*
	 * Not populated: MAP_POPULATE allocated and zeroed all of both rings
	 * at every connect and accept (0.3-0.6 ms each, most of a short
	 * connection's setup; lib/README.md). A page faults in once, when the
	 * stream first passes it, and a connection that moves few bytes never
	 * allocates the rest (the agent's budget counts on that).
	 */
	m->len = FF_SHM_HDR_SIZE + 2 * (size_t)ring;
	m->base = mmap(NULL, m->len, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	m->ring = ring;
	atomic_init(&m->refs, 1);
	if (m->base != MAP_FAILED && !view(m, role, out))
		return 0;
	if (m->base != MAP_FAILED)
		munmap(m->base, m->len);
	free(m);
	return -ENOMEM;
}

int ff_shm_adopt(struct ff_shm_map *m, enum ff_shm_role role, struct ff_shm **out)
{
	int ret = view(m, role, out);

	if (!ret)
		atomic_fetch_add(&m->refs, 1);
	return ret;
}

struct ff_shm_map *ff_shm_map_get(struct ff_shm *sh)
{
	atomic_fetch_add(&sh->map->refs, 1);
	return sh->map;
}

void ff_shm_map_put(struct ff_shm_map *m)
{
	if (!m || atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) != 1)
		return;
	munmap(m->base, m->len);
	free(m);
}

static _Atomic uint32_t *map_word(const struct ff_shm_map *m, size_t off)
{
	return (_Atomic uint32_t *)(void *)(m->base + off);
}

int ff_shm_map_idle(const struct ff_shm_map *m)
{
	return atomic_load_explicit(map_word(m, FF_SHM_OFF_OFFER), memory_order_acquire) ==
		       FF_OFFER_TAKEN &&
	       atomic_load_explicit(map_word(m, FF_SHM_OFF_DONE_OF(FF_SHM_CONNECTOR)), memory_order_acquire) &&
	       atomic_load_explicit(map_word(m, FF_SHM_OFF_DONE_OF(FF_SHM_ACCEPTOR)), memory_order_acquire);
}

/*
 * Take ring's spill word from NONE or USED to FREEING, so that no thread
 * giving pages back (ours or the peer's) is between its CAS and its store:
 * the old value, or -EBUSY.
 */
static int take_spill(struct ff_shm_map *m, size_t ctl)
{
	_Atomic uint32_t *w = map_word(m, ctl + FF_SHM_CTL_SPILL);
	uint32_t v = atomic_load_explicit(w, memory_order_acquire);

	if ((v != FF_SPILL_NONE && v != FF_SPILL_USED) ||
	    !atomic_compare_exchange_strong(w, &v, FF_SPILL_FREEING))
		return -EBUSY;
	return (int)v;
}

int ff_shm_map_reset(struct ff_shm_map *m)
{
	static const size_t words[] = {
		FF_SHM_OFF_SWITCH_BY, FF_SHM_OFF_OFFER_WAIT, FF_SHM_OFF_DONE, FF_SHM_OFF_DONE + 4,
	};
	static const size_t ctl[] = {
		FF_SHM_CTL_CONS_WAIT, FF_SHM_CTL_PROD_WAIT, FF_SHM_CTL_CONS_BUSY,
		FF_SHM_CTL_PROD_SHUT, FF_SHM_CTL_CONS_CLOSED,
	};
	static const size_t idx[] = { FF_SHM_CTL_HEAD, FF_SHM_CTL_TAIL, FF_SHM_CTL_BASE };
	int was[2];

	was[0] = take_spill(m, FF_SHM_OFF_CTL0);
	if (was[0] < 0)
		return was[0];
	was[1] = take_spill(m, FF_SHM_OFF_CTL1);
	if (was[1] < 0) {
		atomic_store_explicit(map_word(m, FF_SHM_OFF_CTL0 + FF_SHM_CTL_SPILL), (uint32_t)was[0],
				      memory_order_release);
		return was[1];
	}
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		atomic_store_explicit(map_word(m, words[i]), 0, memory_order_relaxed);
	for (size_t b = FF_SHM_OFF_CTL0; b <= FF_SHM_OFF_CTL1; b += 512) {	/* both control blocks */
		for (size_t i = 0; i < sizeof(idx) / sizeof(idx[0]); i++)
			atomic_store_explicit((_Atomic uint64_t *)(void *)(m->base + b + idx[i]), 0,
					      memory_order_relaxed);
		for (size_t i = 0; i < sizeof(ctl) / sizeof(ctl[0]); i++)
			atomic_store_explicit(map_word(m, b + ctl[i]), 0, memory_order_relaxed);
		/*
		 * Pages past FF_SHM_KEEP stay (USED) for the next connection,
		 * which then writes a burst into warm pages; they go back once
		 * the ring stays idle (shm/spill.c).
		 */
		atomic_store_explicit(map_word(m, b + FF_SHM_CTL_SPILL),
				      (uint32_t)was[(b - FF_SHM_OFF_CTL0) / 512], memory_order_relaxed);
	}
	atomic_store_explicit(map_word(m, FF_SHM_OFF_OFFER), FF_OFFER_OFFERED, memory_order_release);
	atomic_thread_fence(memory_order_seq_cst);	/* the spill words, then queued (shm/spill.c) */
	if (was[0] == FF_SPILL_USED || was[1] == FF_SPILL_USED)
		ff_shm_spill_later(m);
	return 0;
}

int ff_shm_open(int memfd, enum ff_shm_role role, struct ff_shm **out, const char **why)
{
	int64_t ring = check_memfd(memfd, why);
	int ret;

	if (ring < 0)
		return (int)ring;
	ret = map_memfd(memfd, (uint32_t)ring, role, out);
	if (ret)
		*why = "the memfd cannot be mapped";
	return ret;
}

static void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

int ff_shm_create(uint32_t ring, int *memfd, struct ff_shm **out)
{
	const int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
	int fd = memfd_create("freeflow-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING), ret;

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)(FF_SHM_HDR_SIZE + 2 * (uint64_t)ring)) ||
	    ff_real.fcntl(fd, F_ADD_SEALS, seals)) {
		ret = -errno;
		ff_real.close(fd);
		return ret;
	}
	ret = map_memfd(fd, ring, FF_SHM_CONNECTOR, out);
	if (ret) {
		ff_real.close(fd);
		return ret;
	}
	/* The header the agent would write (protocol vector shm-header); the rest is zero. */
	put_le32((*out)->base, FF_SHM_MAGIC);
	put_le32((*out)->base + 4, FF_SHM_VERSION);
	put_le32((*out)->base + 8, ring);
	atomic_store_explicit(ff_shm_word(*out, FF_SHM_OFF_OFFER), FF_OFFER_OFFERED,
			      memory_order_release);
	*memfd = fd;
	return 0;
}

_Atomic int ff_shm_conns;

void ff_shm_attach(struct ff_conn *c, struct ff_shm *sh, int nonblock)
{
	atomic_store_explicit(&sh->nonblock, nonblock, memory_order_relaxed);
	c->shm = sh;
	atomic_fetch_add(&ff_shm_conns, 1);
	ff_shm_parker_kick();
}

/*
 * Tell the peer both directions are over; no bell: the bell socket is
 * closed or about to be, and its EOF says the same.
 */
void ff_shm_release(struct ff_conn *c)
{
	struct ff_shm *sh = c->shm;

	c->shm = NULL;
	/* Process-local, unlike the flags below: wait/epoll.c drops its registrations on it. */
	atomic_fetch_or(&sh->state, FF_SHM_CLOSED);
	atomic_fetch_sub(&ff_shm_conns, 1);
	atomic_store_explicit(sh->tx.prod_shut, 1, memory_order_release);
	atomic_store_explicit(sh->rx.cons_closed, 1, memory_order_release);
	ff_shm_put(sh);
}

struct ff_shm *ff_shm_get(int fd)
{
	struct ff_slot *s = ff_fd_slot(fd);
	struct ff_shm *sh = NULL;

	if (!s || !(atomic_load_explicit(&s->flags, memory_order_relaxed) & FF_FD_SHM))
		return NULL;
	ff_table_lock();
	if (s->conn && s->conn->shm) {
		sh = s->conn->shm;
		atomic_fetch_add_explicit(&sh->refs, 1, memory_order_relaxed);
	}
	ff_table_unlock();
	return sh;
}

void ff_shm_put(struct ff_shm *sh)
{
	if (atomic_fetch_sub_explicit(&sh->refs, 1, memory_order_acq_rel) != 1)
		return;
	/*
	 * Nothing of this process touches the rings again: a link may reuse
	 * them. Not said by a fork child dropping its copy: its parent goes on.
	 */
	if (sh->pid == getpid()) {
		atomic_store_explicit(ff_shm_word(sh, FF_SHM_OFF_DONE_OF(sh->role)), 1,
				      memory_order_release);
		/*
		 * A burst either way is given back by this process too: only the
		 * reader of a ring queued it at its drain, and may exit first.
		 */
		if (atomic_load_explicit(sh->tx.spill, memory_order_acquire) == FF_SPILL_USED ||
		    atomic_load_explicit(sh->rx.spill, memory_order_acquire) == FF_SPILL_USED)
			ff_shm_spill_later(sh->map);
	}
	ff_shm_map_put(sh->map);
	pthread_mutex_destroy(&sh->tx.mu);
	pthread_mutex_destroy(&sh->rx.mu);
	pthread_mutex_destroy(&sh->wait_mu);
	pthread_cond_destroy(&sh->drained);
	free(sh);
}

void ff_shm_set_nonblock(int fd, int on)
{
	struct ff_shm *sh = ff_shm_get(fd);

	if (!sh)
		return;
	atomic_store_explicit(&sh->nonblock, on, memory_order_relaxed);
	ff_shm_put(sh);
}

/* ---- the indices ---- */

int ff_shm_broken(struct ff_shm *sh, const char *why)
{
	if (!(atomic_fetch_or(&sh->state, FF_SHM_BROKEN) & FF_SHM_BROKEN))
		ff_debug("shm connection reset: %s", why);
	return -ECONNRESET;
}

/* head must lie in [the last head seen, tail + size]. */
int64_t ff_shm_rx_avail(struct ff_shm *sh)
{
	struct ff_shm_ring *r = &sh->rx;
	uint64_t mine = atomic_load_explicit(&r->mine, memory_order_relaxed);
	uint64_t seen = atomic_load_explicit(&r->theirs, memory_order_relaxed);
	uint64_t h = atomic_load_explicit(r->head, memory_order_acquire);

	if (h - mine > sh->size || h - mine < seen - mine)
		return ff_shm_broken(sh, "the peer's head moved backwards or past a full ring");
	atomic_store_explicit(&r->theirs, h, memory_order_relaxed);
	/*
	 * After head (acquire): the base the bytes up to h were written at.
	 * The producer moves it only when it found the ring empty, so never
	 * under bytes we have not taken yet.
	 */
	r->org = atomic_load_explicit(r->base, memory_order_relaxed);
	return (int64_t)(h - mine);
}

/* tail must lie in [the last tail seen, head]. */
int64_t ff_shm_tx_room(struct ff_shm *sh)
{
	struct ff_shm_ring *r = &sh->tx;
	uint64_t mine = atomic_load_explicit(&r->mine, memory_order_relaxed);
	uint64_t seen = atomic_load_explicit(&r->theirs, memory_order_relaxed);
	uint64_t t = atomic_load_explicit(r->tail, memory_order_acquire);

	if (mine - t > mine - seen)
		return ff_shm_broken(sh, "the peer's tail moved backwards or past our head");
	atomic_store_explicit(&r->theirs, t, memory_order_relaxed);
	return mine - t >= sh->cap ? 0 : (int64_t)(sh->cap - (mine - t));
}

/* Best effort: EAGAIN means bells are pending already; EPIPE, the peer is gone. */
static void ring_bell(int fd)
{
	static const char bell = FF_SHM_BELL;

	ff_real.send(fd, &bell, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

void ff_shm_rx_consumed(int fd, struct ff_shm *sh, uint64_t n)
{
	struct ff_shm_ring *r = &sh->rx;
	uint64_t t = atomic_load_explicit(&r->mine, memory_order_relaxed) + n;
	uint64_t h = atomic_load_explicit(&r->theirs, memory_order_relaxed);

	atomic_store_explicit(&r->mine, t, memory_order_relaxed);
	atomic_store_explicit(r->tail, t, memory_order_release);
	atomic_thread_fence(memory_order_seq_cst);
	/*
	 * h may be older than the peer's head, so this overestimates the room
	 * the peer sees: a bell too many, never one too few.
	 */
	if (atomic_load_explicit(r->prod_wait, memory_order_relaxed) &&
	    h - t + ROOM_WAKE(sh) <= sh->cap)
		ring_bell(fd);
	/* Drained after a burst past FF_SHM_KEEP: once per burst, not per byte. */
	if (h == t && atomic_load_explicit(r->spill, memory_order_relaxed) == FF_SPILL_USED)
		ff_shm_spill_later(sh->map);
}

/* tx.mu held: start again at offset 0, in the pages kept, if tx is empty (the tail last seen is i). */
static void rebase(struct ff_shm_ring *r, uint64_t i)
{
	if (atomic_load_explicit(&r->theirs, memory_order_relaxed) == i && r->org != i) {
		r->org = i;
		atomic_store_explicit(r->base, i, memory_order_relaxed);	/* head's release publishes it */
	}
}

int ff_shm_tx_claim(struct ff_shm *sh, uint64_t i, size_t *n)
{
	struct ff_shm_ring *r = &sh->tx;
	int64_t end = 0;
	uint64_t o;

	rebase(r, i);
	for (;;) {
		uint32_t v;
		int64_t room;

		o = (i - r->org) & (sh->size - 1);
		if (r->spilling || o + *n <= FF_SHM_KEEP)
			return 0;
		v = atomic_load_explicit(r->spill, memory_order_acquire);
		/*
		 * The peer gives the pages past KEEP back (which it does only
		 * while the ring is empty), or broke the word: write within KEEP
		 * first, whatever size of piece the writer asked for.
		 */
		if (v >= FF_SPILL_FREEING && o < FF_SHM_KEEP) {
			*n = FF_SHM_KEEP - o;
			return 0;
		}
		if (v > FF_SPILL_FREEING)
			return ff_shm_broken(sh, "the peer wrote a value that is no state into the "
						 "ring's spill word (docs/SHM.md, \"Giving memory back\"): "
						 "the connection is reset; the peer's program writes into "
						 "the shared memory or runs a mismatched libfreeflow: "
						 "update or fix it");
		if (v != FF_SPILL_FREEING &&
		    atomic_compare_exchange_weak(r->spill, &v, FF_SPILL_WRITING)) {
			r->spilling = 1;
			return 0;
		}
		if (v != FF_SPILL_FREEING)
			continue;
		room = ff_shm_tx_room(sh);	/* the ring may be empty now: then rebase */
		if (room < 0)
			return (int)room;
		rebase(r, i);
		if (r->org == i)
			continue;
		/*
		 * Not empty yet (its thread is about to find that out and store
		 * USED back), or a peer that breaks the protocol: look again a
		 * little later, then let the caller wait as for room. No
		 * deadline: such a peer can stall the writer, as one that never
		 * reads can, but never reset the connection.
		 */
		if (!end)
			end = ff_now_ns() + SPILL_WAIT_NS;
		else if (ff_now_ns() >= end) {
			*n = 0;
			return 0;
		}
		nanosleep(&(struct timespec){ 0, SPILL_POLL_NS }, NULL);
	}
}

void ff_shm_tx_produced(int fd, struct ff_shm *sh, uint64_t n)
{
	struct ff_shm_ring *r = &sh->tx;
	uint64_t h = atomic_load_explicit(&r->mine, memory_order_relaxed) + n;
	int spilled = r->spilling;

	atomic_store_explicit(&r->mine, h, memory_order_relaxed);
	atomic_store_explicit(r->head, h, memory_order_release);
	if (spilled) {
		/* After head: a consumer that takes the word then sees these bytes. */
		r->spilling = 0;
		atomic_store_explicit(r->spill, FF_SPILL_USED, memory_order_release);
		ff_shm_spill_touch(sh->map);
	}
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(r->cons_wait, memory_order_relaxed))
		ring_bell(fd);
	/* The consumer may have taken the last byte while we held the claim. */
	if (spilled && atomic_load_explicit(r->tail, memory_order_relaxed) == h)
		ff_shm_spill_later(sh->map);
}

int ff_shm_rx_shut(struct ff_shm *sh)
{
	return atomic_load_explicit(sh->rx.prod_shut, memory_order_acquire) ||
	       (atomic_load_explicit(&sh->state, memory_order_acquire) & FF_SHM_PEER_GONE);
}

int ff_shm_switched_by(struct ff_shm *sh)
{
	uint32_t v = atomic_load_explicit(sh->switch_by, memory_order_acquire);

	if (v == 0 || v == FF_SHM_CONNECTOR || v == FF_SHM_ACCEPTOR || v == FF_SHM_PARKED)
		return (int)v;
	return ff_shm_broken(sh, "switch_by holds neither role nor parked");
}

/* ---- waiting and waking ---- */

/*
 * Lockless and possibly spurious: whether something a waiter for dir cares
 * about may have changed; room is what a producer waits for.
 */
static int news(struct ff_shm *sh, unsigned dir, uint64_t room)
{
	if ((atomic_load_explicit(&sh->state, memory_order_relaxed) &
	     (FF_SHM_BROKEN | FF_SHM_PEER_GONE | FF_SHM_SHUT_RD)) ||
	    atomic_load_explicit(sh->switch_by, memory_order_relaxed))
		return 1;
	if (dir & POLLIN) {
		struct ff_shm_ring *r = &sh->rx;

		if (atomic_load_explicit(r->head, memory_order_relaxed) !=
		    atomic_load_explicit(&r->mine, memory_order_relaxed) ||
		    atomic_load_explicit(r->prod_shut, memory_order_relaxed))
			return 1;
	}
	if (dir & POLLOUT) {
		struct ff_shm_ring *r = &sh->tx;
		uint64_t used = atomic_load_explicit(&r->mine, memory_order_relaxed) -
				atomic_load_explicit(r->tail, memory_order_relaxed);

		/* A used count over the ring is the peer's garbage: the caller's check says so. */
		if (used + room <= sh->cap || used > sh->size ||
		    atomic_load_explicit(r->cons_closed, memory_order_relaxed))
			return 1;
	}
	return 0;
}

int ff_shm_spin_until(int (*check)(void *arg), void *arg)
{
	int64_t end;
	int r;

	if (ff_shm_spin_ns <= 0)
		return 0;
	end = ff_now_ns() + ff_shm_spin_ns;
	for (unsigned i = 1;; i++) {
		if ((r = check(arg)))
			return r;
		cpu_relax();
		if (!(i & 63)) {
			if (ff_now_ns() >= end)
				return 0;
			/*
			 * The peer may be waiting for this very CPU (more
			 * runnable threads than cores): let it run.
			 */
			sched_yield();
		}
	}
}

struct spin_for {
	struct ff_shm *sh;
	unsigned dir;
};

static int spin_news(void *arg)
{
	struct spin_for *s = arg;

	return news(s->sh, s->dir, 1);
}

int ff_shm_spin(struct ff_shm *sh, unsigned dir)
{
	struct spin_for s = { sh, dir };

	return ff_shm_spin_until(spin_news, &s);
}

static void arm(struct ff_shm *sh, unsigned dir)
{
	pthread_mutex_lock(&sh->wait_mu);
	if ((dir & POLLIN) && sh->rx.waiters++ == 0)
		atomic_store_explicit(sh->rx.cons_wait, 1, memory_order_relaxed);
	if ((dir & POLLOUT) && sh->tx.waiters++ == 0)
		atomic_store_explicit(sh->tx.prod_wait, 1, memory_order_relaxed);
	pthread_mutex_unlock(&sh->wait_mu);
	atomic_thread_fence(memory_order_seq_cst);
}

/*
 * wait_mu held. Take the doorbells out of the bell socket, up to a switch
 * message (left for the switch to receive with its fd). thorough: go on
 * until the socket is empty, so that its EOF is seen too.
 */
static void drain(int fd, struct ff_shm *sh, int thorough)
{
	char b[64];
	ssize_t n, k;

	/* Let go of (moved down under wait_mu, or closed): fd is another socket now, or none. */
	if (atomic_load_explicit(&sh->state, memory_order_relaxed) & FF_SHM_CLOSED)
		return;
	/* Before reading: a bell that comes after this is reported, and marked, anew. */
	atomic_store_explicit(&sh->bell_unread, 0, memory_order_relaxed);
	do {
		n = ff_real.recv(fd, b, sizeof(b), MSG_DONTWAIT | MSG_PEEK);
		if (n == 0)
			atomic_fetch_or(&sh->state, FF_SHM_PEER_GONE);
		if (n <= 0)
			return;
		for (k = 0; k < n && b[k] == FF_SHM_BELL; k++)
			;
		if (k && ff_real.recv(fd, b, (size_t)k, MSG_DONTWAIT) != k)
			return;
		if (k < n) {
			/* The peer sets switch_by before it sends S: anything else is a broken peer. */
			if (b[k] != FF_SHM_SWITCH)
				ff_shm_broken(sh, "a byte on the bell socket is neither a doorbell nor a switch");
			else if (ff_shm_switched_by(sh) != (int)(FF_SHM_CONNECTOR + FF_SHM_ACCEPTOR - sh->role))
				ff_shm_broken(sh, "a switch message without switch_by set by the peer");
			return;
		}
	} while (thorough || n == (ssize_t)sizeof(b));
}

/*
 * Returns 1 when this was the last armed waiter: it drained the bell if a
 * wait was told it is readable (this one: readable) since the last drain.
 * Only then: an epoll set of many connections wakes for one bell, and a
 * read of every other bell (EAGAIN) cost a system call each per wake-up.
 * A bell no wait was told of yet is reported later (level-triggered: at
 * once; edge-triggered: its arrival queued the event) and drained then.
 */
static int disarm(int fd, struct ff_shm *sh, unsigned dir, int readable)
{
	int last;

	if (readable)
		ff_shm_bell_rang(sh);
	pthread_mutex_lock(&sh->wait_mu);
	if ((dir & POLLIN) && --sh->rx.waiters == 0)
		atomic_store_explicit(sh->rx.cons_wait, 0, memory_order_relaxed);
	if ((dir & POLLOUT) && --sh->tx.waiters == 0)
		atomic_store_explicit(sh->tx.prod_wait, 0, memory_order_relaxed);
	last = sh->rx.waiters + sh->tx.waiters == 0;
	if (last) {
		if (atomic_load_explicit(&sh->bell_unread, memory_order_relaxed))
			drain(fd, sh, 0);
		pthread_cond_broadcast(&sh->drained);
	}
	pthread_mutex_unlock(&sh->wait_mu);
	return last;
}

/* Unarmed: let the armed threads drain (one of them is the last), at most 1 ms. */
static void step_back(struct ff_shm *sh)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_nsec += STEP_BACK_NS;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&sh->wait_mu);
	if (sh->rx.waiters + sh->tx.waiters)
		pthread_cond_timedwait(&sh->drained, &sh->wait_mu, &ts);
	pthread_mutex_unlock(&sh->wait_mu);
}

int ff_shm_bell_copy(int fd, struct ff_shm *sh)
{
	unsigned st;
	int b;

	pthread_mutex_lock(&sh->wait_mu);
	st = atomic_load_explicit(&sh->state, memory_order_relaxed);
	if (st & FF_SHM_CLOSED)
		b = st & FF_SHM_DOWN ? -ENOENT : -EBADF;
	else if ((b = ff_real.fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0)
		b = errno == EBADF ? -EBADF : fd;
	pthread_mutex_unlock(&sh->wait_mu);
	return b;
}

int ff_shm_wait(int fd, struct ff_shm *sh, unsigned dir, int ms)
{
	struct pollfd p = { .events = POLLIN };
	uint64_t room = ROOM_WAKE(sh);
	int n, err, last;

	arm(sh, dir);
	if (news(sh, dir, room) || (p.fd = ff_shm_bell_copy(fd, sh)) < 0) {
		disarm(fd, sh, dir, 0);
		return p.fd == -EBADF ? -EBADF : 0;
	}
	n = ff_real.poll(&p, 1, ms);
	err = errno;
	if (p.fd != fd)
		ff_real.close(p.fd);
	if (n > 0 && (p.revents & (POLLHUP | POLLERR)))
		atomic_fetch_or(&sh->state, FF_SHM_PEER_GONE);
	last = disarm(fd, sh, dir, n > 0);
	if (n < 0)
		return -err;
	if (n == 0)
		return -ETIMEDOUT;
	if (p.revents & POLLNVAL)
		return -EBADF;		/* closed by another thread */
	if (!last && !news(sh, dir, room))
		step_back(sh);
	return 0;
}

/* ---- readiness ---- */

/* What poll would report for this connection now, from the shared memory. */
static unsigned mem_ready(struct ff_shm *sh)
{
	unsigned st = atomic_load_explicit(&sh->state, memory_order_acquire), r = 0;
	int64_t avail, room;
	int ended, closed;

	if (st & FF_SHM_BROKEN)
		return POLLERR | POLLHUP | POLLIN | POLLRDNORM | POLLRDHUP | POLLOUT | POLLWRNORM;
	pthread_mutex_lock(&sh->rx.mu);
	ended = ff_shm_rx_shut(sh) || (st & FF_SHM_SHUT_RD);
	avail = ff_shm_rx_avail(sh);
	pthread_mutex_unlock(&sh->rx.mu);
	pthread_mutex_lock(&sh->tx.mu);
	room = ff_shm_tx_room(sh);
	pthread_mutex_unlock(&sh->tx.mu);
	if (avail < 0 || room < 0)
		return mem_ready(sh);	/* now broken */
	closed = (st & (FF_SHM_SHUT_WR | FF_SHM_PEER_GONE)) ||
		 atomic_load_explicit(sh->tx.cons_closed, memory_order_relaxed);
	if (avail || ended)
		r |= POLLIN | POLLRDNORM;
	if (ended)
		r |= POLLRDHUP;
	/* A write that would fail does not block either. */
	if ((uint64_t)room >= ROOM_WAKE(sh) || closed)
		r |= POLLOUT | POLLWRNORM;
	/* As AF_UNIX: hung up once neither direction can carry anything more. */
	if ((ended && closed) || (st & FF_SHM_PEER_GONE))
		r |= POLLHUP;
	return r;
}

/*
 * A move down by the peer: adopt it now; by us: done (ff_shm_switch also
 * tells a switch_by the peer wrote in our name). MOVED, or an error.
 */
static unsigned switch_ready(int fd, struct ff_shm *sh)
{
	int by = ff_shm_switched_by(sh);

	if (by < 0)
		return mem_ready(sh);
	if (ff_shm_switch(fd) < 0)
		return POLLERR | POLLHUP;
	return FF_SHM_READY_MOVED;
}

static unsigned ready_locked(int fd, struct ff_shm *sh, unsigned want, int look)
{
	unsigned r;

	if (atomic_load_explicit(sh->switch_by, memory_order_relaxed))
		return switch_ready(fd, sh);
	r = mem_ready(sh) & (want | POLLERR | POLLHUP);
	if (!look || (r && look != FF_SHM_LOOK_RUNG))
		return r;
	/*
	 * Nothing wanted is ready, or the bell rang for an edge-triggered
	 * waiter: the bell may say the peer left or switched. A peer that
	 * closes ends its bell socket before its flags (calls/socket.c, close)
	 * and rings for neither; an edge-triggered registration is woken by
	 * that EOF once, so it is read now even when, say, POLLOUT is ready,
	 * or the end of stream would never be reported.
	 */
	pthread_mutex_lock(&sh->wait_mu);
	if (sh->rx.waiters + sh->tx.waiters == 0) {
		drain(fd, sh, 1);
	} else {
		char b;

		if (ff_real.recv(fd, &b, 1, MSG_DONTWAIT | MSG_PEEK) == 0)
			atomic_fetch_or(&sh->state, FF_SHM_PEER_GONE);
	}
	pthread_mutex_unlock(&sh->wait_mu);
	if (atomic_load_explicit(sh->switch_by, memory_order_relaxed))
		return switch_ready(fd, sh);
	return mem_ready(sh) & (want | POLLERR | POLLHUP);
}

unsigned ff_shm_ready(int fd, unsigned want)
{
	struct ff_shm *sh = ff_shm_get(fd);
	unsigned r;

	if (!sh)
		return FF_SHM_READY_MOVED;
	r = ready_locked(fd, sh, want, 1);
	ff_shm_put(sh);
	return r;
}

static unsigned wait_dir(unsigned want)
{
	return (want & (POLLIN | POLLRDNORM | POLLRDHUP) ? POLLIN : 0) |
	       (want & (POLLOUT | POLLWRNORM) ? POLLOUT : 0);
}

unsigned ff_shm_ready_held(int fd, struct ff_shm *sh, unsigned want, int look)
{
	return ready_locked(fd, sh, want, look);
}

/* news() for a poller: room as mem_ready counts it, and our own SHUT_WR makes writing not block. */
int ff_shm_maybe(struct ff_shm *sh, unsigned want)
{
	unsigned dir = wait_dir(want);

	return news(sh, dir, ROOM_WAKE(sh)) ||
	       ((dir & POLLOUT) &&
		(atomic_load_explicit(&sh->state, memory_order_relaxed) & FF_SHM_SHUT_WR));
}

unsigned ff_shm_arm(int fd, unsigned want, struct ff_shm_waiter *w)
{
	unsigned r;

	w->sh = ff_shm_get(fd);
	if (!w->sh)
		return FF_SHM_READY_MOVED;
	w->want = wait_dir(want);
	arm(w->sh, w->want);
	r = ready_locked(fd, w->sh, want, 0);
	if (r & FF_SHM_READY_MOVED)
		ff_shm_disarm(fd, w, 0);
	return r;
}

void ff_shm_raw_arm(struct ff_shm *sh)
{
	arm(sh, POLLIN);
}

void ff_shm_raw_disarm(int fd, struct ff_shm *sh)
{
	/* Their bells may be unread: the last waiter to leave drains them. */
	disarm(fd, sh, POLLIN, 1);
	ff_shm_put(sh);
}

void ff_shm_bell_rang(struct ff_shm *sh)
{
	atomic_store_explicit(&sh->bell_unread, 1, memory_order_relaxed);
}

void ff_shm_disarm(int fd, struct ff_shm_waiter *w, int rang)
{
	if (!w->sh)
		return;
	disarm(fd, w->sh, w->want, rang);
	ff_shm_put(w->sh);
	w->sh = NULL;
}
