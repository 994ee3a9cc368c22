/* SPDX-License-Identifier: MIT */
/*
 * Giving a burst's memory back (docs/SHM.md, "Giving memory back").
 *
 * A ring's pages past FF_SHM_KEEP hold bytes the reader had not caught up
 * with. Freeing them at every drain made each later burst fault them in
 * again (a 1 MiB ping-pong took 2.5 times as long), so a drained ring with
 * its spill word USED is queued here instead, and a thread gives its pages
 * back once the ring has stayed empty and untouched (tail unchanged) for
 * FF_SHM_IDLE_MS, counted per ring from when it was queued or last seen
 * in use: a connection that keeps carrying bursts keeps its pages,
 * an idle one holds no more than the kept start of each ring. The wait is
 * long (a second, as malloc arenas keep freed memory) because 20 ms was
 * shorter than a 1 MiB echo between two event loops: each connection
 * wrote its bursts into fresh pages, 1.7 ms per MiB here against 0.2 warm.
 * Only the FF_SHM_WARM_CHANNELS channels used last get that second (a
 * channel used since the last look goes to the front of the queue: ranked
 * by when they were queued, a Node.js server's busiest channels, queued
 * first, faulted their pages in at every echo of 1 MiB); the rest,
 * FF_SHM_CROWD_IDLE_MS (the thread is woken when one falls behind), so
 * bursts on many connections one after the other do not pin a second's
 * worth of them.
 *
 * The thread works on the shared words only (spill, head, tail), as the
 * protocol allows either end to: CAS USED -> FREEING, the ring still
 * empty, madvise, NONE. It holds a reference to the mapping while it is
 * queued, and runs only while something is queued or waits to be dropped
 * (like xlink.c's reaper), with every signal blocked. Lock order: a
 * ring's mu or link.c's, then mu (ff_shm_spill_later is called with
 * either held); drop_mu before mu.
 *
 * Queuing is Dekker's pattern again: a drain stores tail (or spill USED),
 * fences, loads queued; the thread, dropping a map, stores queued = 0,
 * fences, loads spill. Either the drain sees 0 and queues the map, or the
 * thread sees USED and keeps it.
 *
 * The same thread drops the references a closing link lets go of
 * (ff_shm_map_put_later): unmapping a channel and freeing its pages took
 * 70 us each, and an acceptor found its last client's link closed in
 * accept() of the next client's first connection, 1.1 ms for 16 channels
 * (docs/SHM.md, "Giving memory back"). It drops them after its next wait,
 * off any program thread, one at a time under drop_mu: a fork never
 * finds one half dropped, and waits for no more than one.
 */
#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <time.h>

#include "core/core.h"
#include "shm/shm.h"

#define MS		1000000LL

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct ff_shm_map *queue;	/* under mu */
static int giving;			/* the thread runs; under mu */
static int queued;			/* maps in queue; under mu */
static pthread_cond_t poke_cv;		/* CLOCK_MONOTONIC: the thread sleeps on it */
static int cv_ready;			/* poke_cv is initialised; under mu */
static int poked;			/* the thread is to look now; under mu */
static int64_t sleep_until;		/* the thread's next look, ns; under mu */
static struct ff_shm_map *doomed;	/* references to drop (drop_next); under mu */
static int ndoomed;			/* under mu */
static pthread_mutex_t drop_mu = PTHREAD_MUTEX_INITIALIZER;	/* before mu; held to drop one */
/*
 * The thread is woken to drop references once more than this many wait:
 * a link's channels (link.c's CHANS_MAX), so that the memory of links
 * closed one after another goes within a wait of the crowd's, not a
 * second's.
 */
#define DROP_POKE	32
static _Thread_local int forking;	/* this thread holds both for a fork */

void ff_shm_give_back(uint8_t *data, uint64_t ring)
{
	if (ring > FF_SHM_KEEP)
		madvise(data + FF_SHM_KEEP, ring - FF_SHM_KEEP, MADV_REMOVE);
}

static _Atomic uint64_t *idx(const struct ff_shm_map *m, int ring, size_t field)
{
	return (_Atomic uint64_t *)(void *)(m->base + FF_SHM_OFF_CTL0 + 512 * (size_t)ring + field);
}

static _Atomic uint32_t *spill(const struct ff_shm_map *m, int ring)
{
	return (_Atomic uint32_t *)(void *)(m->base + FF_SHM_OFF_CTL0 + 512 * (size_t)ring +
					    FF_SHM_CTL_SPILL);
}

/* Ring of m was seen in use at now (its tail t). */
static void in_use(struct ff_shm_map *m, int ring, uint64_t t, int64_t now)
{
	m->seen[ring] = t;
	m->since[ring] = now;
}

/*
 * Whether ring of m carries bytes past FF_SHM_KEEP at its tail t: a burst
 * being read. Small messages after it start again at base, within KEEP,
 * and leave the burst's pages idle.
 */
static int past_keep(const struct ff_shm_map *m, int ring, uint64_t t)
{
	uint64_t b = atomic_load_explicit(idx(m, ring, FF_SHM_CTL_BASE), memory_order_relaxed);

	return ((t - b) & (m->ring - 1)) > FF_SHM_KEEP;
}

/*
 * Give ring of m's pages past KEEP back if it is empty: CAS USED ->
 * FREEING, then both indices again (a reuse, link.c, may have laid the
 * ring out afresh since they were last loaded), and NONE, or USED back.
 * Whether they were given back.
 */
static int give_back_if_empty(struct ff_shm_map *m, int ring)
{
	uint32_t v = FF_SPILL_USED;

	if (!atomic_compare_exchange_strong(spill(m, ring), &v, FF_SPILL_FREEING))
		return 0;
	if (atomic_load_explicit(idx(m, ring, FF_SHM_CTL_HEAD), memory_order_acquire) ==
	    atomic_load_explicit(idx(m, ring, FF_SHM_CTL_TAIL), memory_order_acquire)) {
		ff_shm_give_back(m->base + FF_SHM_HDR_SIZE + (size_t)ring * m->ring, m->ring);
		v = FF_SPILL_NONE;
	} else {
		v = FF_SPILL_USED;
	}
	atomic_store_explicit(spill(m, ring), v, memory_order_release);
	return v == FF_SPILL_NONE;
}

/*
 * One look at ring of m at now, its pages kept idle ns past their last
 * use: when to look again, or 0 (nothing of ours to give back).
 */
static int64_t look(struct ff_shm_map *m, int ring, int64_t now, int64_t idle)
{
	uint32_t v = atomic_load_explicit(spill(m, ring), memory_order_acquire);
	uint64_t t = atomic_load_explicit(idx(m, ring, FF_SHM_CTL_TAIL), memory_order_acquire);

	if (v == FF_SPILL_NONE || v > FF_SPILL_FREEING)
		return 0;	/* given back, or the peer's garbage: nothing of ours to free */
	if (v == FF_SPILL_USED && (t == m->seen[ring] || !past_keep(m, ring, t))) {
		m->seen[ring] = t;
		if (now - m->since[ring] < idle)
			return m->since[ring] + idle;	/* drained, not for long enough yet */
		if (give_back_if_empty(m, ring))
			return 0;
	}
	in_use(m, ring, t, now);
	return now + idle;
}

/*
 * mu held: whether m stays queued (a reference of ours is not the last,
 * and a ring waits), its pages kept idle ns; *next gets the earliest time
 * a ring of it waits for.
 */
static int keep(struct ff_shm_map *m, int64_t now, int64_t idle, int64_t *next)
{
	int64_t a, b;

	if (atomic_load_explicit(&m->refs, memory_order_acquire) == 1) {
		/* Nothing of ours uses it again, but the peer may keep it mapped (its link). */
		give_back_if_empty(m, 0);
		give_back_if_empty(m, 1);
		return 0;
	}
	a = look(m, 0, now, idle);
	b = look(m, 1, now, idle);
	if (a && a < *next)
		*next = a;
	if (b && b < *next)
		*next = b;
	if (a || b)
		return 1;
	atomic_store_explicit(&m->queued, 0, memory_order_relaxed);
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(spill(m, 0), memory_order_relaxed) == FF_SPILL_USED ||
	    atomic_load_explicit(spill(m, 1), memory_order_relaxed) == FF_SPILL_USED) {
		atomic_store_explicit(&m->queued, 1, memory_order_relaxed);
		if (now + idle < *next)
			*next = now + idle;
		return 1;
	}
	return 0;
}

/* The list of references to drop, emptied; mu held. */
static struct ff_shm_map *take_doomed(void)
{
	struct ff_shm_map *d = doomed;

	doomed = NULL;
	ndoomed = 0;
	return d;
}

static void put_all(struct ff_shm_map *d)
{
	while (d) {
		struct ff_shm_map *m = d;

		d = m->drop_next;
		ff_shm_map_put(m);
	}
}

/* mu held: drop the doomed references one by one, each with mu let go and drop_mu held. */
static void drop_doomed(void)
{
	while (doomed) {
		struct ff_shm_map *m;

		pthread_mutex_unlock(&mu);
		pthread_mutex_lock(&drop_mu);
		pthread_mutex_lock(&mu);
		m = doomed;
		if (m) {
			doomed = m->drop_next;
			ndoomed--;
		}
		pthread_mutex_unlock(&mu);
		ff_shm_map_put(m);
		pthread_mutex_unlock(&drop_mu);
		pthread_mutex_lock(&mu);
	}
}

/* mu held: the maps used since the last look to the front of the queue, in queue order. */
static void touched_first(void)
{
	struct ff_shm_map *front = NULL, **end = &front;

	for (struct ff_shm_map **p = &queue; *p;) {
		struct ff_shm_map *m = *p;

		if (!atomic_exchange_explicit(&m->touched, 0, memory_order_relaxed)) {
			p = &m->next;
			continue;
		}
		*p = m->next;
		*end = m;
		end = &m->next;
	}
	*end = queue;
	queue = front;
}

/*
 * Sleeps until the first queued ring has been drained and untouched long
 * enough: FF_SHM_IDLE_MS for the FF_SHM_WARM_CHANNELS maps first in the
 * queue (used last), FF_SHM_CROWD_IDLE_MS for the rest. A ring queued
 * while it sleeps is due no sooner than every one queued before, but
 * one it pushes past the first FF_SHM_WARM_CHANNELS may be: then it is
 * poked (ff_shm_spill_later).
 */
static void *give(void *arg)
{
	int64_t next = ff_now_ns() + FF_SHM_CROWD_IDLE_MS * MS;

	(void)arg;
	pthread_mutex_lock(&mu);
	while (queue || doomed) {
		struct timespec ts = { next / 1000000000, next % 1000000000 };
		int64_t now;
		int kept = 0;

		sleep_until = next;
		while (!poked && pthread_cond_timedwait(&poke_cv, &mu, &ts) != ETIMEDOUT)
			;
		poked = 0;
		drop_doomed();
		touched_first();
		now = ff_now_ns();
		next = now + FF_SHM_IDLE_MS * MS;
		for (struct ff_shm_map **p = &queue; *p;) {
			struct ff_shm_map *m = *p;
			int64_t idle = (kept < FF_SHM_WARM_CHANNELS ? FF_SHM_IDLE_MS : FF_SHM_CROWD_IDLE_MS) * MS;

			if (keep(m, now, idle, &next)) {
				kept++;
				p = &m->next;
				continue;
			}
			*p = m->next;
			queued--;
			atomic_store_explicit(&m->touched, 0, memory_order_relaxed);
			atomic_store_explicit(&m->queued, 0, memory_order_relaxed);
			ff_shm_map_put(m);
		}
	}
	giving = 0;
	pthread_mutex_unlock(&mu);
	return NULL;
}

/*
 * mu held: see that the thread runs, and looks soon enough if a map just
 * fell past the first FF_SHM_WARM_CHANNELS or more than DROP_POKE
 * references wait to be dropped. Without a thread (none to be had), pages stay until the
 * channel goes; whether the thread runs.
 */
static int start(int64_t now)
{
	if (!cv_ready) {
		ff_cond_init_monotonic(&poke_cv);
		cv_ready = 1;
	}
	if (!giving) {
		giving = ff_start_quiet_thread(give);
	} else if ((queued > FF_SHM_WARM_CHANNELS || ndoomed > DROP_POKE) &&
		   sleep_until > now + FF_SHM_CROWD_IDLE_MS * MS) {
		sleep_until = now;	/* one poke until it has looked */
		poked = 1;
		pthread_cond_signal(&poke_cv);
	}
	return giving;
}

void ff_shm_spill_touch(struct ff_shm_map *m)
{
	if (atomic_load_explicit(&m->queued, memory_order_relaxed) &&
	    !atomic_load_explicit(&m->touched, memory_order_relaxed))
		atomic_store_explicit(&m->touched, 1, memory_order_relaxed);
}

void ff_shm_spill_later(struct ff_shm_map *m)
{
	if (atomic_load_explicit(&m->queued, memory_order_relaxed)) {
		ff_shm_spill_touch(m);
		return;
	}
	pthread_mutex_lock(&mu);
	if (!atomic_load_explicit(&m->queued, memory_order_relaxed)) {
		int64_t now = ff_now_ns();

		atomic_fetch_add(&m->refs, 1);
		atomic_store_explicit(&m->touched, 1, memory_order_relaxed);	/* used just now */
		atomic_store_explicit(&m->queued, 1, memory_order_relaxed);
		for (int r = 0; r < 2; r++)
			in_use(m, r, atomic_load_explicit(idx(m, r, FF_SHM_CTL_TAIL), memory_order_relaxed),
			       now);
		m->next = queue;
		queue = m;
		queued++;
		start(now);
	}
	pthread_mutex_unlock(&mu);
}

void ff_shm_map_put_later(struct ff_shm_map *m)
{
	struct ff_shm_map *at_once = NULL;

	if (!m)
		return;
	if (!forking)
		pthread_mutex_lock(&mu);
	m->drop_next = doomed;
	doomed = m;
	ndoomed++;
	/* Within a fork the thread is started after (parent) or not at all (child). */
	if (!forking) {
		if (!start(ff_now_ns()))
			at_once = take_doomed();
		pthread_mutex_unlock(&mu);
	}
	put_all(at_once);
}

void ff_shm_spill_atfork_prepare(void)
{
	pthread_mutex_lock(&drop_mu);
	pthread_mutex_lock(&mu);
	forking = 1;
}

void ff_shm_spill_atfork_parent(void)
{
	struct ff_shm_map *at_once = NULL;

	forking = 0;
	if (doomed && !start(ff_now_ns()))
		at_once = take_doomed();
	pthread_mutex_unlock(&mu);
	pthread_mutex_unlock(&drop_mu);
	put_all(at_once);
}

/* The thread is not in the child, and its connections moved down: let go of the mappings. */
void ff_shm_spill_atfork_child(void)
{
	while (queue) {
		struct ff_shm_map *m = queue;

		queue = m->next;
		atomic_store_explicit(&m->touched, 0, memory_order_relaxed);
		atomic_store_explicit(&m->queued, 0, memory_order_relaxed);
		ff_shm_map_put(m);
	}
	put_all(take_doomed());
	giving = queued = poked = cv_ready = 0;	/* the thread may have left poke_cv in use */
	sleep_until = 0;
	forking = 0;
	pthread_mutex_unlock(&mu);
	pthread_mutex_unlock(&drop_mu);
}
