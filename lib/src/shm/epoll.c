/* SPDX-License-Identifier: MIT */
/*
 * The shim's own record of the shm registrations of each epoll fd, and
 * looking at them: which to report, arming them for a sleep, their bells;
 * and the replay of a connection's registrations once it is decided or
 * moves down (ff_epoll_replay). The design note is at the top of epoll.c;
 * the interface is shm/shm.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "shm/shm.h"

#define TAG(fd)		((uint64_t)FF_EP_TAG_HI << 32 | (uint32_t)(fd))

#define BELL		(EPOLLIN | EPOLLET)
#define KICK		(BELL | EPOLLOUT)
/* Asked of the rings: everything an epoll registration can want. */
#define ALL_READY	(EPOLLIN | EPOLLRDNORM | EPOLLOUT | EPOLLWRNORM | EPOLLRDHUP)
/* What EPOLLONESHOT leaves of a registration once it fired (the kernel's EP_PRIVATE_BITS). */
#define PRIVATE_BITS	(EPOLLWAKEUP | EPOLLONESHOT | EPOLLET | EPOLLEXCLUSIVE)
/* What the kernel accepts with EPOLLEXCLUSIVE (its EPOLLEXCLUSIVE_OK_BITS). */
#define EXCLUSIVE_OK	(EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP | EPOLLWAKEUP | EPOLLET | \
			 EPOLLEXCLUSIVE)

/* What a look at a connection saw: its bits and the indices that tell what is new. */
struct seen {
	uint32_t bits;
	uint64_t rx_head, tx_tail, tx_head;
};

struct shm_reg {
	struct shm_reg *next;
	int fd;
	struct ff_shm *sh;		/* a reference, while registered */
	struct epoll_event ev;		/* as the program gave it */
	int off;			/* EPOLLONESHOT fired: off until EPOLL_CTL_MOD */
	int orphan;			/* fd closed, the connection kept by a dup: silent */
	int kicked;			/* the bell is registered with EPOLLOUT too */
	int rung;			/* the kernel reported its bell: look at it fully */
	int pins;			/* looks in progress (they hold no lock) */
	unsigned adopted;		/* brought in by a swap: ff_ep_adopts then; else 0 */
	uint32_t absorbed;		/* kernel events with its data taken out of a batch (ff_epset_absorb) */
	int dead;			/* unlinked; freed by the last unpin */
	unsigned reported;		/* the round that reported it last */
	struct seen last;		/* at the last report (edge-triggered) */
};

struct ff_epset {
	pthread_mutex_t mu;
	struct shm_reg *regs;
	_Atomic int nregs;
	int sleepers;			/* threads armed for this set */
	unsigned turn;			/* rotates the start of a look */
	unsigned rounds;		/* rounds of ff_epset_scan: each reports a registration once */
	_Atomic unsigned split;		/* alternates the odd slot between shm and kernel */
	_Atomic int64_t asked;		/* when the kernel's events were last asked for */
	/*
	 * The fd numbers that lead to this set: an epoll fd and its copies
	 * (dup, F_DUPFD: mio registers through a copy and waits on the
	 * original). Changed under sets_mu; read without it by ff_epset_new's
	 * early return. And the number the program used with it last, for the
	 * shim's own calls on its behalf.
	 */
	_Atomic int names;
	_Atomic int epfd;
	struct ff_epset *next_free;	/* on free_sets, under sets_mu */
};

/*
 * Sets by epoll fd number: a directory of lazily made chunks. A set no
 * number leads to any more goes to free_sets, to be the next new one: never
 * freed, as ff_epset_get and the waits use sets without a lock.
 */
#define CHUNK		1024
#define NCHUNKS		1024
static _Atomic(struct ff_epset *) *_Atomic sets[NCHUNKS];
static pthread_mutex_t sets_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ff_epset *free_sets;
/* shm registrations in this process: while 0, epoll_wait goes straight to libc. */
_Atomic int ff_ep_total;
_Atomic unsigned ff_ep_adopts;

/* sets_mu held: the slot of epfd's set, its chunk made if need be (NULL: out of memory). */
static _Atomic(struct ff_epset *) *slot_of(int epfd)
{
	_Atomic(struct ff_epset *) *chunk = atomic_load(&sets[epfd / CHUNK]);

	if (!chunk && (chunk = calloc(CHUNK, sizeof(*chunk))))
		atomic_store(&sets[epfd / CHUNK], chunk);
	return chunk ? &chunk[epfd % CHUNK] : NULL;
}

static void forget_all(struct ff_epset *es, int epfd, void *arg);

/* sets_mu held: a new, empty set named by epfd alone, a free one if any (NULL: out of memory). */
static struct ff_epset *new_set(int epfd)
{
	struct ff_epset *es = free_sets;

	if (es) {
		free_sets = es->next_free;
		/* What a call racing the rename that freed it added, e.g. epoll_ctl vs dup2. */
		pthread_mutex_lock(&es->mu);
		forget_all(es, epfd, NULL);
		pthread_mutex_unlock(&es->mu);
		atomic_store(&es->asked, 0);
	} else if ((es = calloc(1, sizeof(*es)))) {
		pthread_mutex_init(&es->mu, NULL);
	} else {
		return NULL;
	}
	atomic_store(&es->names, 1);
	atomic_store(&es->epfd, epfd);
	return es;
}

struct ff_epset *ff_epset_get(int epfd, int create)
{
	_Atomic(struct ff_epset *) *chunk, *slot;
	struct ff_epset *es;

	if (epfd < 0 || epfd >= CHUNK * NCHUNKS)
		return NULL;
	chunk = atomic_load(&sets[epfd / CHUNK]);
	es = chunk ? atomic_load(&chunk[epfd % CHUNK]) : NULL;
	if (es || !create)
		return es;
	pthread_mutex_lock(&sets_mu);
	if ((slot = slot_of(epfd)) && !(es = atomic_load(slot)) && (es = new_set(epfd)))
		atomic_store(slot, es);
	pthread_mutex_unlock(&sets_mu);
	return es;
}

int ff_epset_busy(const struct ff_epset *es)
{
	return es && atomic_load_explicit(&es->nregs, memory_order_relaxed);
}

static int closed(const struct shm_reg *r)
{
	return (atomic_load_explicit(&r->sh->state, memory_order_relaxed) & FF_SHM_CLOSED) != 0;
}

static void reg_free(struct shm_reg *r)
{
	ff_shm_put(r->sh);
	free(r);
}

/* es->mu held: unlink *p; freed now, or by the last look still using it. */
static void unlink_reg(struct ff_epset *es, struct shm_reg **p)
{
	struct shm_reg *r = *p;

	*p = r->next;
	atomic_fetch_sub(&es->nregs, 1);
	atomic_fetch_sub(&ff_ep_total, 1);
	r->dead = 1;
	if (!r->pins)
		reg_free(r);
}

static struct shm_reg **find(struct ff_epset *es, int fd, const struct ff_shm *sh)
{
	struct shm_reg **p = &es->regs;

	while (*p && ((*p)->fd != fd || (*p)->sh != sh))
		p = &(*p)->next;
	return p;
}

/* es->mu held: forget registrations whose connection was closed (or moved down unseen). */
static void sweep(struct ff_epset *es)
{
	for (struct shm_reg **p = &es->regs; *p;) {
		if (closed(*p))
			unlink_reg(es, p);
		else
			p = &(*p)->next;
	}
}

static void fresh_look(struct shm_reg *r)
{
	/* Nothing reported yet: whatever is ready is new, as after the kernel's ADD/MOD. */
	r->last = (struct seen){ 0 };
	r->off = 0;
	r->rung = 1;
}

/* A kick is needed when a waiter may sleep unaware of the change (see the design note). */
static int kick_needed(const struct ff_epset *es)
{
	return !atomic_load_explicit(&es->nregs, memory_order_relaxed) || es->sleepers;
}

/* es->mu held: the bell of r, in the kernel, with or without EPOLLOUT. 0 or -errno. */
static int bell_ctl(int epfd, int op, struct shm_reg *r, int kick)
{
	struct epoll_event kev = { .events = kick ? KICK : BELL, .data.u64 = TAG(r->fd) };

	if (ff_real.epoll_ctl(epfd, op, r->fd, &kev) < 0)
		return -errno;
	r->kicked = kick;
	return 0;
}

/*
 * es->mu held: a new registration of sh at fd, its bell added to the
 * kernel (op EPOLL_CTL_ADD), or modified there (EPOLL_CTL_MOD: the kernel
 * has it, this table not, e.g. a raw system call added it). Takes over the
 * caller's reference.
 */
static int reg_add(struct ff_epset *es, int epfd, int op, int fd, struct ff_shm *sh,
		   const struct epoll_event *ev, unsigned adopted)
{
	struct shm_reg *r = calloc(1, sizeof(*r));
	int ret;

	if (!r)
		return -ENOMEM;
	*r = (struct shm_reg){ .fd = fd, .sh = sh, .ev = *ev, .adopted = adopted };
	fresh_look(r);
	ret = bell_ctl(epfd, op, r, kick_needed(es));
	if (ret) {
		free(r);
		return ret;
	}
	r->next = es->regs;
	es->regs = r;
	atomic_fetch_add(&es->nregs, 1);
	atomic_fetch_add(&ff_ep_total, 1);
	return 0;
}

/* What the kernel refuses in epoll_ctl's arguments, for a registration it never sees. */
static int check_op(int op, const struct epoll_event *ev, const struct shm_reg *r)
{
	if (op != EPOLL_CTL_ADD && op != EPOLL_CTL_MOD && op != EPOLL_CTL_DEL)
		return -EINVAL;
	if (op == EPOLL_CTL_DEL)
		return 0;
	if (!ev)
		return -EFAULT;
	if (op == EPOLL_CTL_ADD && (ev->events & EPOLLEXCLUSIVE) && (ev->events & ~EXCLUSIVE_OK))
		return -EINVAL;
	if (op == EPOLL_CTL_MOD && ((ev->events & EPOLLEXCLUSIVE) ||
				    (r && (r->ev.events & EPOLLEXCLUSIVE))))
		return -EINVAL;
	return 0;
}

/* epoll_ctl on an shm fd: 0, -errno, or FF_SHM_MOVED (not on shm: the caller goes on). */
int ff_epset_ctl(int epfd, int op, int fd, const struct epoll_event *ev)
{
	struct shm_reg **p;
	struct ff_shm *sh;
	struct ff_epset *es;
	int ret;

	if (epfd < 0)
		return -EBADF;
	if (!(sh = ff_shm_get(fd)))
		return FF_SHM_MOVED;
	if (!(es = ff_epset_get(epfd, 1))) {
		ff_shm_put(sh);
		return -ENOMEM;
	}
	atomic_store(&es->epfd, epfd);
	pthread_mutex_lock(&es->mu);
	p = find(es, fd, sh);
	ret = check_op(op, ev, *p);
	if (ret) {
		/* refused, as the kernel would */
	} else if (op == EPOLL_CTL_DEL) {
		ret = ff_real.epoll_ctl(epfd, EPOLL_CTL_DEL, fd, NULL) < 0 ? -errno : 0;
		if (!ret && *p)
			unlink_reg(es, p);
	} else if (*p && op == EPOLL_CTL_ADD) {
		ret = -EEXIST;
	} else if (*p) {
		(*p)->ev = *ev;
		fresh_look(*p);
		if (kick_needed(es))
			ret = bell_ctl(epfd, EPOLL_CTL_MOD, *p, 1);
	} else {
		/* New here; the kernel's answer to the bell says whether it may be. */
		ret = reg_add(es, epfd, op, fd, sh, ev, 0);
		sh = ret ? sh : NULL;	/* the registration took the reference */
	}
	pthread_mutex_unlock(&es->mu);
	if (sh)
		ff_shm_put(sh);
	return ret;
}

/* Table lock held: sh, now at fd, takes the registrations made before the swap. */
void ff_epset_adopt(int fd, struct ff_shm *sh, const struct ff_epreg *regs)
{
	/* After the swap's dup3: a kernel wait begun later sees no event of the old file. */
	unsigned adopted = atomic_fetch_add(&ff_ep_adopts, 1) + 1;

	for (const struct ff_epreg *g = regs; g; g = g->next) {
		struct ff_epset *es = ff_epset_get(g->epfd, 1);
		int ret = -ENOMEM;

		if (es) {
			/* The table lock is held: take the reference as ff_shm_get would. */
			atomic_fetch_add_explicit(&sh->refs, 1, memory_order_relaxed);
			pthread_mutex_lock(&es->mu);
			ret = reg_add(es, g->epfd, EPOLL_CTL_ADD, fd, sh, &g->ev, adopted);
			pthread_mutex_unlock(&es->mu);
			if (ret)
				ff_shm_put(sh);
		}
		if (ret)
			ff_fallback(fd, "epoll registration in fd %d lost after the swap: %s", g->epfd,
				    strerror(-ret));
	}
}

/* es->mu held: sh moved down; its registrations at fd go to the kernel socket there now. */
static void move_down(struct ff_epset *es, int epfd, int fd, const struct ff_shm *sh)
{
	struct shm_reg **p = find(es, fd, sh);

	while (*p) {
		struct epoll_event ev = (*p)->ev;

		if ((*p)->off)
			ev.events &= PRIVATE_BITS;
		if (ff_real.epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
			ff_fallback(fd, "epoll registration in fd %d lost moving down: %s", epfd,
				    strerror(errno));
		unlink_reg(es, p);
		p = find(es, fd, sh);
	}
}

/* Each set that exists, with its number; fn runs with the set's mu held. */
static void for_each_set(void (*fn)(struct ff_epset *es, int epfd, void *arg), void *arg)
{
	for (int c = 0; c < NCHUNKS; c++) {
		_Atomic(struct ff_epset *) *chunk = atomic_load(&sets[c]);

		for (int i = 0; chunk && i < CHUNK; i++) {
			struct ff_epset *es = atomic_load(&chunk[i]);

			int epfd;

			if (!ff_epset_busy(es))
				continue;
			epfd = atomic_load(&es->epfd);
			/* A copy of the epoll fd may have been closed: the number used last is live. */
			if (ff_epset_get(epfd, 0) != es)
				epfd = c * CHUNK + i;
			pthread_mutex_lock(&es->mu);
			fn(es, epfd, arg);
			pthread_mutex_unlock(&es->mu);
		}
	}
}

struct moved {
	int fd;
	const struct ff_shm *sh;
};

static void move_down_in(struct ff_epset *es, int epfd, void *arg)
{
	const struct moved *m = arg;

	move_down(es, epfd, m->fd, m->sh);
}

void ff_epset_moved(int fd, const struct ff_shm *sh)
{
	struct moved m = { fd, sh };

	if (atomic_load(&ff_ep_total))
		for_each_set(move_down_in, &m);
}

/*
 * Table lock held: the decision is made (swapped, or overlay), or an shm
 * connection moved down. In the last case the fd no longer has FF_FD_SHM
 * while its conn still holds the memory (shm/switch.c, swap_fds): the shm
 * registrations of that memory at fd become kernel registrations.
 */
void ff_epoll_replay(int fd, struct ff_epreg *regs, int swapped)
{
	struct ff_slot *s = ff_fd_slot(fd);
	struct ff_shm *sh = s && s->conn ? s->conn->shm : NULL;

	if (swapped && sh && (atomic_load(&s->flags) & FF_FD_SHM)) {
		ff_epset_adopt(fd, sh, regs);
		return;
	}
	for (struct ff_epreg *r = regs; r; r = r->next) {
		struct epoll_event ev = r->ev;

		ff_real.epoll_ctl(r->epfd, swapped ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev);
	}
	if (sh)
		ff_epset_moved(fd, sh);
}

static void forget_all(struct ff_epset *es, int epfd, void *arg)
{
	(void)epfd, (void)arg;
	while (es->regs)
		unlink_reg(es, &es->regs);
}

static void sweep_in(struct ff_epset *es, int epfd, void *arg)
{
	(void)epfd, (void)arg;
	sweep(es);
}

/*
 * sets_mu held: the slot of epfd now leads to es (NULL: nothing). A set
 * no number leads to any more lost its epoll file: its registrations go
 * (under its mu, taken after sets_mu), their references with them.
 */
static void rename_slot(_Atomic(struct ff_epset *) *slot, struct ff_epset *es)
{
	struct ff_epset *old = atomic_load(slot);

	if (old == es)
		return;
	if (es)
		es->names++;
	atomic_store(slot, es);
	if (old && --old->names == 0) {
		pthread_mutex_lock(&old->mu);
		forget_all(old, -1, NULL);
		pthread_mutex_unlock(&old->mu);
		old->next_free = free_sets;
		free_sets = old;
	}
}

/*
 * A new epoll fd: a set left under its number by a closed one is not its
 * own. Made now, so that a copy of the fd (ff_epset_dup) finds it.
 */
void ff_epset_new(int epfd)
{
	_Atomic(struct ff_epset *) *slot;
	struct ff_epset *es;

	if (epfd < 0 || epfd >= CHUNK * NCHUNKS || ff_busy)
		return;
	/* Its own set already, and no shm registration anywhere: it is empty (no lock). */
	es = ff_epset_get(epfd, 0);
	if (es && !atomic_load(&ff_ep_total) && atomic_load(&es->names) == 1) {
		atomic_store(&es->epfd, epfd);
		return;
	}
	pthread_mutex_lock(&sets_mu);
	if (!(slot = slot_of(epfd))) {
		/* out of memory: ff_epset_get makes it at the first registration */
	} else if ((es = atomic_load(slot)) && es->names == 1) {
		/* Its own already (the usual case): emptied in place. */
		pthread_mutex_lock(&es->mu);
		forget_all(es, epfd, NULL);
		atomic_store(&es->epfd, epfd);
		pthread_mutex_unlock(&es->mu);
	} else if ((es = new_set(epfd))) {
		/* Shared with copies of a closed epoll fd, or none yet. */
		es->names = 0;		/* counted by rename_slot */
		rename_slot(slot, es);
	}
	pthread_mutex_unlock(&sets_mu);
	if (atomic_load(&ff_ep_total))
		for_each_set(sweep_in, NULL);
}

/* newfd is a copy of oldfd now (dup, dup2, dup3, F_DUPFD): if oldfd is an epoll fd, one set. */
void ff_epset_dup(int oldfd, int newfd)
{
	_Atomic(struct ff_epset *) *slot;
	struct ff_epset *es;

	if (oldfd == newfd || newfd < 0 || newfd >= CHUNK * NCHUNKS || ff_busy)
		return;
	es = ff_epset_get(oldfd, 0);
	/* Neither is an epoll fd the shim knows: nothing to do, and nothing made. */
	if (!es && !ff_epset_get(newfd, 0))
		return;
	pthread_mutex_lock(&sets_mu);
	if ((slot = slot_of(newfd)))
		rename_slot(slot, es);
	pthread_mutex_unlock(&sets_mu);
}

/* ---- looking at a set's registrations ---- */

/* A registration picked for a full look, and what the look saw. */
struct cand {
	struct shm_reg *r;
	struct seen now;
	int rung;			/* its bell rang: read the bell socket too */
	int looked, orphan;
};

/*
 * es->mu held. Whether r, seeing now, reports, as the kernel would; if so
 * *out is filled and the report noted.
 */
static int decide(struct shm_reg *r, const struct seen *now, unsigned round,
		  struct epoll_event *out)
{
	uint32_t mask = r->ev.events | EPOLLERR | EPOLLHUP, own = now->bits & mask;
	uint32_t ev = own | (r->absorbed & mask);

	if (r->dead || r->off || !ev) {
		r->last.bits &= own;
		return 0;
	}
	if ((r->ev.events & EPOLLET) && !r->absorbed && !(ev & ~r->last.bits) &&
	    !((ev & EPOLLIN) && now->rx_head != r->last.rx_head) &&
	    !((ev & EPOLLOUT) && now->tx_tail != r->last.tx_tail &&
	      now->tx_head != r->last.tx_head)) {
		r->last.bits &= ev;
		return 0;
	}
	r->last = *now;
	r->last.bits = own;
	r->absorbed = 0;
	if (r->ev.events & EPOLLONESHOT)
		r->off = 1;
	r->reported = round;
	out->events = ev;
	out->data = r->ev.data;
	return 1;
}

/* A full look at a pinned registration (no lock held). */
static void look(struct cand *c)
{
	struct shm_reg *r = c->r;
	struct ff_shm *sh = r->sh, *at;
	unsigned bits;

	c->looked = 1;
	c->now.bits = 0;
	if (closed(r))
		return;
	/* The look reads the bell at fd: it must still be this connection's. */
	at = ff_shm_get(r->fd);
	if (at)
		ff_shm_put(at);
	if (at != sh) {
		c->orphan = !closed(r);
		return;
	}
	/*
	 * Moved down: the move has replayed the registration natively
	 * (ff_epoll_replay), and a later look drops this one (closed).
	 */
	bits = ff_shm_ready_held(r->fd, sh, ALL_READY, c->rung ? FF_SHM_LOOK_RUNG : 0);
	if (bits & FF_SHM_READY_MOVED)
		return;
	/* The indices as ff_shm_ready_held just validated them (shm.h). */
	c->now = (struct seen){
		.bits = bits,
		.rx_head = atomic_load_explicit(&sh->rx.theirs, memory_order_relaxed),
		.tx_tail = atomic_load_explicit(&sh->tx.theirs, memory_order_relaxed),
		.tx_head = atomic_load_explicit(&sh->tx.mine, memory_order_relaxed),
	};
}

/* es->mu held: whether r may have something to report (no lock of r's, no system call). */
static int maybe(const struct shm_reg *r)
{
	return !r->off && !r->orphan && (r->rung || ff_shm_maybe(r->sh, r->ev.events));
}

/* es->mu held: a round of collect(), in which each registration is reported once at most. */
static unsigned new_round(struct ff_epset *es)
{
	return ++es->rounds ? es->rounds : ++es->rounds;
}

/*
 * Report up to room of es's registrations into out, none reported in the
 * same round (0: a new one) already; returns how many.
 * Candidates are picked and pinned under es->mu, looked at without it,
 * and decided under it again, in batches of what still fits.
 */
int ff_epset_scan(struct ff_epset *es, unsigned *round, struct epoll_event *out, int room)
{
	struct cand stack[16], *cand = stack;
	int n = 0, got = 0, nregs, start, i = 0;
	struct shm_reg *r;

	if (room <= 0)
		return 0;
	pthread_mutex_lock(&es->mu);
	if (!*round)
		*round = new_round(es);
	sweep(es);
	nregs = atomic_load(&es->nregs);
	if (nregs > (int)(sizeof(stack) / sizeof(stack[0])) &&
	    !(cand = malloc((size_t)nregs * sizeof(*cand)))) {
		cand = stack;
		nregs = (int)(sizeof(stack) / sizeof(stack[0]));
	}
	start = nregs ? (int)(es->turn++ % (unsigned)nregs) : 0;
	/* From the rotating start to the end, then from the beginning. */
	for (int pass = 0; pass < 2; pass++) {
		i = 0;
		for (r = es->regs; r && n < nregs; r = r->next, i++) {
			if ((pass == 0) != (i >= start) || r->reported == *round || !maybe(r))
				continue;
			cand[n++] = (struct cand){ .r = r, .rung = r->rung };
			r->rung = 0;
			r->pins++;
		}
	}
	pthread_mutex_unlock(&es->mu);
	for (int b = 0; b < n && got < room;) {
		int e = b;

		/* Look at as many as could still be reported, then decide them together. */
		for (int want = room - got; e < n && want; e++)
			look(&cand[e]), want -= cand[e].now.bits != 0;
		pthread_mutex_lock(&es->mu);
		for (; b < e; b++)
			if (cand[b].orphan)
				cand[b].r->orphan = 1;
			else if (got < room)
				got += decide(cand[b].r, &cand[b].now, *round, out + got);
			else if (!cand[b].r->dead)
				cand[b].r->rung = 1;	/* looked at, not reported: look again */
		pthread_mutex_unlock(&es->mu);
	}
	pthread_mutex_lock(&es->mu);
	for (int k = 0; k < n; k++) {
		r = cand[k].r;
		if (!cand[k].looked)
			r->rung = 1;	/* no room left for it: look again next time */
		if (--r->pins == 0 && r->dead)
			reg_free(r);
	}
	pthread_mutex_unlock(&es->mu);
	if (cand != stack)
		free(cand);
	return got;
}

/* ---- bells and sleeps ---- */

void ff_epset_rang(struct ff_epset *es, int epfd, int fd, uint32_t events)
{
	pthread_mutex_lock(&es->mu);
	for (struct shm_reg *r = es->regs; r; r = r->next) {
		if (r->fd != fd)
			continue;
		r->rung = 1;
		ff_shm_bell_rang(r->sh);
		/*
		 * The kernel says the peer's bell is gone (its last copy closed):
		 * noted now. Its close may have come behind doorbells not yet
		 * read, and a look that finds those stops there; this edge would
		 * not come again (the design note in shm/ring.c, "End of stream").
		 */
		if (events & (EPOLLHUP | EPOLLERR))
			atomic_fetch_or(&r->sh->state, FF_SHM_PEER_GONE);
		/* A kick: taken back, or each doorbell the peer drains would wake us. */
		if ((events & EPOLLOUT) && r->kicked && !closed(r))
			bell_ctl(epfd, EPOLL_CTL_MOD, r, 0);
	}
	pthread_mutex_unlock(&es->mu);
}

int ff_epset_maybe(struct ff_epset *es)
{
	int any = 0;

	pthread_mutex_lock(&es->mu);
	for (struct shm_reg *r = es->regs; r && !any; r = r->next)
		any = maybe(r);
	pthread_mutex_unlock(&es->mu);
	return any;
}

int ff_epset_absorb(struct ff_epset *es, const struct epoll_event *ev, unsigned adopts)
{
	struct shm_reg *r;

	pthread_mutex_lock(&es->mu);
	for (r = es->regs; r; r = r->next)
		if (r->adopted && (int)(r->adopted - adopts) > 0 && !r->dead &&
		    r->ev.data.u64 == ev->data.u64)
			break;
	if (r) {
		r->absorbed |= ev->events;
		r->rung = 1;	/* looked at (and reported) in this call's scan, or the next */
	}
	pthread_mutex_unlock(&es->mu);
	return r != NULL;
}

int ff_epset_odd_to_shm(struct ff_epset *es)
{
	return atomic_fetch_add(&es->split, 1) & 1;
}

void ff_epset_asked(struct ff_epset *es, int nothing_left)
{
	if (es)
		atomic_store_explicit(&es->asked, nothing_left ? ff_now_ns() : 0,
				      memory_order_relaxed);
}

int ff_epset_asked_lately(struct ff_epset *es)
{
	return es && ff_now_ns() - atomic_load_explicit(&es->asked, memory_order_relaxed) <
			     FF_KERNEL_FRESH_NS;
}

static unsigned arm_want(uint32_t events)
{
	return (events & (EPOLLIN | EPOLLRDNORM | EPOLLRDHUP) ? POLLIN : 0) |
	       (events & (EPOLLOUT | EPOLLWRNORM) ? POLLOUT : 0);
}

/*
 * About to sleep: announce it (ff_shm_arm) on every registration that is
 * on. Counted as a sleeper in the same step, so that a registration added
 * or re-enabled after this is kicked (see the design note).
 */
void ff_epset_arm(struct ff_epset *es, struct ff_armed *a)
{
	int cap = (int)(sizeof(a->stack) / sizeof(a->stack[0]));

	*a = (struct ff_armed){ .es = es };
	a->v = a->stack;
	pthread_mutex_lock(&es->mu);
	if (atomic_load(&es->nregs) > cap) {
		struct ff_arm1 *v = malloc((size_t)atomic_load(&es->nregs) * sizeof(*v));

		if (v) {
			a->v = v;
			cap = atomic_load(&es->nregs);
		}
	}
	for (struct shm_reg *r = es->regs; r; r = r->next) {
		unsigned want = arm_want(r->ev.events);

		if (r->off || r->orphan || !want || closed(r))
			continue;
		if (a->n == cap) {
			a->partial = 1;
			break;
		}
		a->v[a->n++] = (struct ff_arm1){ .fd = r->fd, .sh = r->sh, .want = want };
	}
	es->sleepers++;
	pthread_mutex_unlock(&es->mu);
	for (int i = 0; i < a->n; i++) {
		struct ff_arm1 *x = &a->v[i];
		unsigned got = ff_shm_arm(x->fd, x->want, &x->w);

		/* Not the connection registered any more (closed, fd reused): not ours to arm. */
		if (!(got & FF_SHM_READY_MOVED) && x->w.sh != x->sh)
			ff_shm_disarm(x->fd, &x->w, 0);
	}
}

void ff_epset_disarm(struct ff_armed *a)
{
	/* The bells the kernel reported are marked by ff_epset_rang, drained by the last waiter. */
	for (int i = 0; i < a->n; i++)
		ff_shm_disarm(a->v[i].fd, &a->v[i].w, 0);
	pthread_mutex_lock(&a->es->mu);
	a->es->sleepers--;
	pthread_mutex_unlock(&a->es->mu);
	if (a->v != a->stack)
		free(a->v);
}

