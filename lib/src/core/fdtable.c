/* SPDX-License-Identifier: MIT */
/*
 * The fd table: one slot per fd number, saying whether the shim tracks it
 * and, if so, which connection object it refers to.
 *
 * The table is sized once from RLIMIT_NOFILE (the hard limit, so a program
 * that raises its soft limit later is still covered), capped at FD_CAP
 * slots; calloc of this size maps fresh zero pages, so untouched slots cost
 * nothing (and leak checkers still see the conns it points to). An fd above
 * the table is simply never tracked: it stays plain TCP.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "core/core.h"

#define FD_CAP		(1 << 20)
#define FD_MIN		1024

static struct ff_slot *table;
static int table_size;
static _Atomic int hiwater = -1;
_Atomic int ff_pending_count;

static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t decided = PTHREAD_COND_INITIALIZER;

#ifdef FF_CHECK_INIT
/* make test-asan: set by ff_table_init, whether or not it got memory. */
static atomic_int table_made;

/* The table read before start-up: some exported function did not enter (proc.h). */
static void not_started(const char *what, int fd)
{
	if (atomic_load_explicit(&table_made, memory_order_relaxed))
		return;
	fprintf(stderr, "libfreeflow: %s(%d) before start-up: an exported function "
		"must call REAL(), ff_slot_enter() or ff_init() first (FF_CHECK_INIT)\n", what, fd);
	abort();
}
#endif

void ff_table_init(void)
{
	struct rlimit rl;
	rlim_t n = FD_MIN;
	void *p;

#ifdef FF_CHECK_INIT
	atomic_store_explicit(&table_made, 1, memory_order_relaxed);
#endif
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		n = rl.rlim_max > rl.rlim_cur ? rl.rlim_max : rl.rlim_cur;
	if (n > FD_CAP || n == RLIM_INFINITY)
		n = FD_CAP;
	if (n < FD_MIN)
		n = FD_MIN;
	p = calloc((size_t)n, sizeof(struct ff_slot));
	if (!p)
		return;		/* table_size 0: nothing is tracked, all stays TCP */
	table = p;
	table_size = (int)n;
}

/*
 * The one accessor. Locking rule:
 *  - slot->flags may be read without any lock (atomic); the data path does
 *    only that, so untracked and decided fds cost one load;
 *  - slot->conn and everything in a struct ff_conn are read and written only
 *    with the table lock held; a caller that needs conn data after
 *    unlocking copies it first (a conn is freed when its last fd closes);
 *  - flags are written only with the table lock held;
 *  - the lock is never held across a call to the agent or any blocking
 *    system call.
 * It never starts the library: only exported functions do (ff_slot_enter()
 * in proc.h); all other code runs after start-up.
 */
struct ff_slot *ff_fd_slot(int fd)
{
#ifdef FF_CHECK_INIT
	/* Relaxed: a caller that entered properly is ordered after start-up already. */
	not_started("ff_fd_slot", fd);
#endif
	if (fd < 0 || fd >= table_size)
		return NULL;
	return &table[fd];
}

void ff_table_lock(void)
{
	pthread_mutex_lock(&table_mu);
}

void ff_table_unlock(void)
{
	pthread_mutex_unlock(&table_mu);
}

void ff_table_wait(void)
{
	pthread_cond_wait(&decided, &table_mu);
}

void ff_table_wait_until(int64_t end)
{
	/* decided runs on CLOCK_REALTIME (a fork child re-creates it so): convert. */
	struct timespec ts;
	int64_t left = end - ff_now_ms();

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += left / 1000;
	ts.tv_nsec += left % 1000 * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	if (left > 0)
		pthread_cond_timedwait(&decided, &table_mu, &ts);
}

struct ff_conn *ff_conn_settled(struct ff_slot *s)
{
	while (s->conn && s->conn->state == FF_ST_NEGOTIATING)
		ff_table_wait();
	return s->conn;
}

void ff_table_broadcast(void)
{
	pthread_cond_broadcast(&decided);
}

int ff_table_hiwater(void)
{
#ifdef FF_CHECK_INIT
	/* Its -1 before start-up makes a scan of the table silently find nothing. */
	not_started("ff_table_hiwater", -1);
#endif
	return atomic_load(&hiwater);
}

struct ff_conn *ff_conn_new(int family)
{
	struct ff_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->family = family;
	c->kern_family = family;
	c->pending_fd = -1;
	return c;
}

static int is_pending(enum ff_state st)
{
	return st == FF_ST_PENDING || st == FF_ST_NEGOTIATING;
}

/* The slot flags of an fd referring to c. */
_Atomic int ff_moved_seen;

static uint16_t slot_flags(const struct ff_conn *c)
{
	if (c->moved && !c->shm)
		atomic_store_explicit(&ff_moved_seen, 1, memory_order_relaxed);
	/* Held (shm/resume.c): calls on it wait, also at a new fd of it, until the hold ends. */
	return FF_FD_TRACKED | (is_pending(c->state) ? FF_FD_PENDING : 0) |
	       (c->state == FF_ST_SWAPPED ? FF_FD_SWAPPED : 0) | (c->shm ? FF_FD_SHM : 0) |
	       ((c->moved && !c->shm) || c->held ? FF_FD_MOVED : 0);
}

static void note_fd(int fd)
{
	int hw = atomic_load(&hiwater);

	while (fd > hw && !atomic_compare_exchange_weak(&hiwater, &hw, fd))
		;
}

void ff_fd_attach(int fd, struct ff_conn *c)
{
	struct ff_slot *s = ff_fd_slot(fd);

	if (!s)
		return;
	c->refs++;
	s->conn = c;
	atomic_store(&s->flags, slot_flags(c));
	note_fd(fd);
}

void ff_fd_reflag(int fd)
{
	struct ff_slot *s = ff_fd_slot(fd);

	if (s && s->conn)
		atomic_store(&s->flags, slot_flags(s->conn));
}

void ff_fd_mark(int fd, uint16_t flags)
{
	struct ff_slot *s = ff_fd_slot(fd);

	if (!s)
		return;
	ff_table_lock();
	if (!s->conn) {
		atomic_store(&s->flags, flags);
		note_fd(fd);
	}
	ff_table_unlock();
}

int ff_fd_close_control(int fd)
{
	struct ff_slot *s = ff_fd_slot(fd);
	int ret = -EBADF;

	if (!s)
		return ret;
	/*
	 * Under the lock: the application closing the number clears its slot
	 * under it too, so a file it opens there after is never closed here.
	 */
	ff_table_lock();
	if (!s->conn && (atomic_load(&s->flags) & FF_FD_CONTROL)) {
		atomic_store(&s->flags, 0);
		ret = ff_real.close(fd) ? -errno : 0;
	}
	ff_table_unlock();
	return ret;
}

struct ff_conn *ff_fd_detach(int fd)
{
	struct ff_slot *s = ff_fd_slot(fd);
	struct ff_conn *c;

	if (!s)
		return NULL;
	c = s->conn;
	s->conn = NULL;
	atomic_store(&s->flags, 0);
	return c;
}

/*
 * Pending conns have exactly one fd (a dup before the decision opts the
 * connection out, see calls/socket.c), so the PENDING bit lives in that
 * one slot, and so does the SWAPPED bit that the decision sets; later fds
 * of a swapped conn get it from ff_fd_attach.
 */
void ff_conn_set_state(struct ff_conn *c, enum ff_state st)
{
	int was = is_pending(c->state), now = is_pending(st);
	struct ff_slot *s = c->pending_fd >= 0 ? ff_fd_slot(c->pending_fd) : NULL;

	c->state = st;
	if (was == now)
		return;
	atomic_fetch_add(&ff_pending_count, now ? 1 : -1);
	if (s && s->conn == c)
		atomic_store(&s->flags, slot_flags(c));
	if (!now)
		c->pending_fd = -1;
	ff_table_broadcast();
}

int ff_conn_unref(struct ff_conn *c)
{
	return --c->refs == 0;
}

void ff_conn_forget_epregs(struct ff_conn *c)
{
	while (c->epregs) {
		struct ff_epreg *r = c->epregs;

		c->epregs = r->next;
		free(r);
	}
}

void ff_conn_dispose(struct ff_conn *c)
{
	if (c->readers || c->writers || c->polling) {	/* calls on it still running (shm/resume.c): the last frees it */
		c->disposed = 1;
		return;
	}
	if (is_pending(c->state))
		atomic_fetch_sub(&ff_pending_count, 1);
	ff_conn_forget_epregs(c);
	free(c);
}

/* fork child, table lock held (fork.c). */
void ff_table_atfork_child(void)
{
	int hw = atomic_load(&hiwater);

	pthread_cond_init(&decided, NULL);
	/* The threads inside calls were the parent's (no hold is under way at a fork: shm/resume.c). */
	for (int fd = 0; fd <= hw && table; fd++)
		if (table[fd].conn)
			table[fd].conn->readers = table[fd].conn->writers = table[fd].conn->polling = 0;
}
