/* SPDX-License-Identifier: MIT */
/*
 * Back to shared memory (docs/SHM.md, "Back to shared memory"): a
 * connection moved down to a socket pair goes onto a new shm channel once
 * its second holder is gone, and one parked on TCP for a migration once
 * both its ends are on one host, at a moment when no byte is in flight.
 * The agent hands each end's parking thread the channel (RESUME), and for
 * a parked one a new bell. Each end holds its writers while its readers
 * drain what came (and, on TCP, until the peer has what it wrote), then
 * every call on it; the two meet in the channel's resume word, each says
 * whether its queues are empty, GO if both are, and each attaches the
 * channel (the pair, or the new bell put at its fds, the channel's bell),
 * then waits for the other's DONE before its program goes on.
 *
 * Calls on such connections (FF_FD_MOVED) are counted here by direction,
 * and wait while one is held; poll and select over one are counted but
 * never wait (one asleep in the kernel at the move is woken by the peer's
 * bells). Paths that may give the pair to another process (fork, exec,
 * spawn) wait for a hold under way, then keep new ones off for SHARE_MS.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "core/core.h"
#include "shm/shm.h"

/*
 * How long a hold waits for its writers to leave the kernel and its
 * readers to drain, then for every call to leave: the program's writers
 * wait meanwhile, so a try that does not move costs it at most this and
 * PEER_MS.
 */
#define HOLD_MS		20
/* How long an end waits in the resume word for its peer. */
#define PEER_MS		100
/*
 * How long an end, moved, waits for its peer's DONE before its program
 * goes on (a peer gone ends the wait): a write before the peer is in
 * place would not ring for the peer's pollers.
 */
#define DONE_MS		2000
/* After a fork, exec or spawn: no hold (the other process may still have the pair). */
#define SHARE_MS	2000

#define BOTH	(FF_RESUME_HELD_CONNECTOR | FF_RESUME_HELD_ACCEPTOR)
#define QUIET	(FF_RESUME_QUIET_CONNECTOR | FF_RESUME_QUIET_ACCEPTOR)

/* Under the table lock. */
static int resuming;		/* a connection is held */
static int64_t share_until;	/* CLOCK_MONOTONIC ms: no hold before */

int ff_moved_enter(int fd, int writes, struct ff_entered *e)
{
	struct ff_slot *s = ff_fd_slot(fd);
	struct ff_conn *c;
	int shm = 0, i = e->c[0] ? 1 : 0;

	if (!s)
		return 0;
	/* A fork child or a new image holding only such connections starts its thread here. */
	ff_shm_parker_kick();
	ff_table_lock();
	while ((c = s->conn) && c->held > !writes)
		ff_table_wait();
	if (c && c->shm) {
		shm = 1;
	} else if (c && c->moved) {
		*(writes ? &c->writers : &c->readers) += 1;
		e->c[i] = c;
		e->writes[i] = writes;
	}
	ff_table_unlock();
	return shm;
}

/* Table lock held: one call on c left; 1 if c is to be freed now. */
static int left(struct ff_conn *c)
{
	if (c->held)
		ff_table_broadcast();
	return c->disposed && !c->readers && !c->writers && !c->polling;
}

void ff_moved_leave(struct ff_entered *e)
{
	int err = errno;

	if (!e->c[0])
		return;
	ff_table_lock();
	for (int i = 0; i < 2 && e->c[i]; i++) {
		struct ff_conn *c = e->c[i];

		*(e->writes[i] ? &c->writers : &c->readers) -= 1;
		if (left(c))
			ff_conn_dispose(c);
	}
	ff_table_unlock();
	e->c[0] = e->c[1] = NULL;
	errno = err;
}

void ff_moved_enter_polled(int fd, struct ff_entered_list *e)
{
	struct ff_slot *s = fd >= 0 ? ff_fd_slot(fd) : NULL;
	struct ff_conn **cs;
	int *fds;

	if (ff_busy || !e || !s || !(atomic_load_explicit(&s->flags, memory_order_relaxed) & FF_FD_MOVED))
		return;
	cs = realloc(e->c, (size_t)(e->n + 1) * sizeof(*e->c));
	if (cs)
		e->c = cs;
	fds = cs ? realloc(e->fd, (size_t)(e->n + 1) * sizeof(*e->fd)) : NULL;
	if (fds)
		e->fd = fds;
	if (!fds)
		return;
	ff_table_lock();
	if (s->conn && s->conn->moved && !s->conn->shm) {
		s->conn->polling++;
		e->c[e->n] = s->conn;
		e->fd[e->n++] = fd;
	}
	ff_table_unlock();
}

void ff_moved_enter_poll(struct pollfd *fds, nfds_t n, struct ff_entered_list *e)
{
	for (nfds_t i = 0; fds && i < n; i++)
		ff_moved_enter_polled(fds[i].fd, e);
}

void ff_moved_enter_select(int nfds, fd_set *r, fd_set *w, fd_set *x, struct ff_entered_list *e)
{
	for (int fd = 0; fd < nfds && fd < FD_SETSIZE; fd++)
		if ((r && FD_ISSET(fd, r)) || (w && FD_ISSET(fd, w)) || (x && FD_ISSET(fd, x)))
			ff_moved_enter_polled(fd, e);
}

void ff_moved_leave_list(struct ff_entered_list *e)
{
	int err = errno;

	for (int i = 0; i < e->n; i++) {
		struct ff_conn *c = e->c[i];
		struct ff_shm *sh = NULL;

		ff_table_lock();
		c->polling--;
		/* The last poller from before the move back lets the channel's consumer rest. */
		if (!c->polling && c->raw_armed) {
			c->raw_armed = 0;
			if ((sh = c->shm))
				atomic_fetch_add(&sh->refs, 1);
		}
		if (left(c))
			ff_conn_dispose(c);
		ff_table_unlock();
		if (sh)
			ff_shm_raw_disarm(e->fd[i], sh);
	}
	free(e->c);
	free(e->fd);
	errno = err;
}

int ff_moved_since(struct ff_entered_list *e)
{
	int any = 0;

	if (!e->n)
		return 0;
	ff_table_lock();
	for (int i = 0; i < e->n && !any; i++)
		any = e->c[i]->shm != NULL;
	ff_table_unlock();
	if (any) {
		/* Out of the kernel's wait: its count goes, and the arming for it (the last one drains). */
		ff_moved_leave_list(e);
		*e = (struct ff_entered_list){ NULL, NULL, 0 };
	}
	return any;
}

void ff_moved_shut(int fd, int how)
{
	struct ff_slot *s = ff_fd_slot(fd);

	ff_table_lock();
	if (s->conn && how >= SHUT_RD && how <= SHUT_RDWR)
		s->conn->shut |= how + 1;
	ff_table_unlock();
}

int ff_resume_busy(void)
{
	return resuming;
}

void ff_resume_shared(void)
{
	share_until = ff_now_ms() + SHARE_MS;
}

void ff_resume_passing(int fd)
{
	struct ff_slot *s = ff_fd_slot(fd);

	if (!s || !(atomic_load_explicit(&s->flags, memory_order_relaxed) & FF_FD_TRACKED))
		return;
	ff_table_lock();
	while (resuming)
		ff_table_wait();
	if (s->conn)
		s->conn->passed = 1;
	ff_table_unlock();
}

int ff_moved_any(void)
{
	int hw, any = 0;

	if (!atomic_load_explicit(&ff_moved_seen, memory_order_relaxed))
		return 0;
	ff_table_lock();
	hw = ff_table_hiwater();
	for (int fd = 0; fd <= hw && !any; fd++)
		any = (atomic_load_explicit(&ff_fd_slot(fd)->flags, memory_order_relaxed) & FF_FD_MOVED) != 0;
	ff_table_unlock();
	return any;
}

/* Table lock held: the fds of c, at most max; how many. */
static int fds_of(const struct ff_conn *c, int *fds, int max)
{
	int hw = ff_table_hiwater(), n = 0;

	for (int fd = 0; fd <= hw && n < max; fd++)
		if (ff_fd_slot(fd)->conn == c)
			fds[n++] = fd;
	return n;
}

/*
 * Table lock held: the one connection moved as p says (a bell: parked;
 * else a pair) at p's ends (*fd one of its fds), or NULL with *why.
 */
static struct ff_conn *find(const struct ff_park *p, int *fd, const char **why)
{
	int kind = p->bell >= 0 ? FF_MOVED_PARKED : FF_MOVED_PAIR, hw = ff_table_hiwater();
	struct ff_conn *found = NULL;

	*why = kind == FF_MOVED_PARKED ? "no parked connection at that tuple" : "no socket-pair connection at that tuple";
	for (int i = 0; i <= hw; i++) {
		struct ff_conn *c = ff_fd_slot(i)->conn;

		if (!c || c->moved != kind || c->shm || c == found || !ff_park_same_ends(&c->ends, p))
			continue;
		if (found) {
			*why = "two such connections at that tuple";
			return NULL;
		}
		found = c;
		*fd = i;
	}
	return found;
}

/*
 * This end's queues empty: what it has not read (SIOCINQ), and what it
 * wrote that is not yet with the peer (SIOCOUTQ: on AF_UNIX what the peer
 * has not read, on TCP what the peer has not acknowledged).
 */
static int queues_empty(int fd)
{
	int in = -1, out = -1;

	return !ff_real.ioctl(fd, SIOCINQ, &in) && !ff_real.ioctl(fd, SIOCOUTQ, &out) && !in && !out;
}

/* Shut down here, either way: by this program, or by the peer's writing side (or gone). */
static int shut_here(int fd, const struct ff_conn *c)
{
	struct pollfd p = { fd, POLLRDHUP, 0 };

	return c->shut || ff_real.poll(&p, 1, 0) < 0 || (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* A /proc file's whole text (an epoll fd's fdinfo: a line per registration), or NULL. */
static char *slurp(const char *path)
{
	size_t len = 0, cap = 4096;
	char *buf = malloc(cap);
	int f = ff_real.open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = 0;

	while (buf && f >= 0 && (n = ff_real.read(f, buf + len, cap - len - 1)) > 0) {
		char *more = (len += (size_t)n) + 1 < cap ? buf : realloc(buf, cap *= 2);

		if (!more)
			free(buf);
		buf = more;
	}
	if (f >= 0)
		ff_real.close(f);
	if (buf && (f < 0 || n < 0)) {
		free(buf);
		buf = NULL;
	}
	if (buf)
		buf[len] = 0;
	return buf;
}

/*
 * The program's registrations of the socket of inode ino, at any of fds,
 * in this process's epoll sets, read from /proc/self/fdinfo, each in
 * regs[] of its fd (they become shm registrations): 0, or -1 if they could
 * not all be read. The connection is held: no epoll_ctl on it meanwhile.
 */
static int find_registrations(const int *fds, int n, ino_t ino, struct ff_epreg **regs)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int ret = 0;

	if (!d)
		return -1;
	while ((de = readdir(d))) {
		char path[64], link[32], *buf;
		int epfd = atoi(de->d_name);
		ssize_t len;

		snprintf(path, sizeof(path), "/proc/self/fd/%d", epfd);
		len = readlink(path, link, sizeof(link) - 1);
		if (len <= 0 || epfd == dirfd(d))
			continue;
		link[len] = 0;
		if (strcmp(link, "anon_inode:[eventpoll]"))
			continue;
		snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", epfd);
		if (!(buf = slurp(path))) {
			ret = -1;
			continue;
		}
		for (char *line = buf, *nl; *line; line = nl ? nl + 1 : line + strlen(line)) {
			unsigned long long data;
			unsigned long i;
			unsigned ev;
			int tfd, k = 0;
			struct ff_epreg *r;

			nl = strchr(line, '\n');
			if (sscanf(line, "tfd: %d events: %x data: %llx pos:%*d ino:%lx", &tfd, &ev, &data,
				   &i) != 4 || i != (unsigned long)ino)
				continue;
			while (k < n && fds[k] != tfd)
				k++;
			if (k == n)
				continue;
			if (!(r = calloc(1, sizeof(*r)))) {
				ret = -1;
				continue;
			}
			r->epfd = epfd;
			r->ev.events = ev;
			r->ev.data.u64 = data;
			r->next = regs[k];
			regs[k] = r;
		}
		free(buf);
	}
	closedir(d);
	return ret;
}

static void free_registrations(struct ff_epreg **regs, int n)
{
	for (int i = 0; i < n; i++)
		while (regs[i]) {
			struct ff_epreg *r = regs[i];

			regs[i] = r->next;
			free(r);
		}
}

/*
 * Table lock held: bell, a parked connection's new one, at every fd of c
 * in place of its TCP socket, with each fd's flags; the TCP options the
 * program set are kept in c, as for any shm connection.
 */
static void put_bell(struct ff_conn *c, int bell, const int *fds, int n, int fl)
{
	ff_real.fcntl(bell, F_SETFL, fl >= 0 ? fl & O_NONBLOCK : 0);
	c->kern_family = AF_UNIX;
	ff_sockopt_carry(fds[0], bell, c);
	for (int i = 0; i < n; i++) {
		int fdfl = ff_real.fcntl(fds[i], F_GETFD);

		ff_real.dup3(bell, fds[i], fdfl >= 0 && (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0);
	}
	ff_conn_set_state(c, FF_ST_SWAPPED);
}

/*
 * Table lock held, c held and quiet at GO: sh becomes c's channel at fds,
 * its bell the pair, or bell (parked), regs[] its registrations. The
 * slots keep FF_FD_MOVED until the hold ends, so calls wait for it still.
 */
static void commit(struct ff_conn *c, struct ff_shm *sh, int bell, const int *fds, int n, struct ff_epreg **regs)
{
	int all[256], m = fds_of(c, all, (int)(sizeof(all) / sizeof(all[0])));
	int fl = ff_real.fcntl(fds[0], F_GETFL);

	/* Out of the kernel's sets while the fds still name the socket they were made for. */
	for (int i = 0; i < n; i++)
		for (struct ff_epreg *r = regs[i]; r; r = r->next)
			ff_real.epoll_ctl(r->epfd, EPOLL_CTL_DEL, fds[i], NULL);
	if (bell >= 0)
		put_bell(c, bell, all, m, fl);
	c->moved = 0;
	ff_shm_attach(c, sh, fl >= 0 && (fl & O_NONBLOCK));
	/* Every fd of it, also one a dup() made during the hold: FF_FD_SHM, and FF_FD_MOVED while held. */
	for (int i = 0; i < m; i++)
		ff_fd_reflag(all[i]);
	for (int i = 0; i < n; i++)
		ff_epset_adopt(fds[i], sh, regs[i]);
	/* An fcntl(F_SETFL) meanwhile found the fd not on shm yet: read the flag again. */
	fl = ff_real.fcntl(fds[0], F_GETFL);
	atomic_store(&sh->nonblock, fl >= 0 && (fl & O_NONBLOCK));
	ff_ledger_moved(c->ledger, fds[0], FF_PATH_SHM, (uint32_t)FF_SHM_RESIDENT(sh->size), NULL, NULL);
}

/* Table lock held: the hold on c ends; its calls go on, on shm if it moved. */
static void release(struct ff_conn *c)
{
	int fds[256], n = fds_of(c, fds, (int)(sizeof(fds) / sizeof(fds[0])));

	c->held = 0;
	for (int i = 0; i < n; i++)
		ff_fd_reflag(fds[i]);
	resuming = 0;
	ff_table_broadcast();
}

/* Take this end off the meeting before it began (the peer then decides OFF, or waits in vain). */
static void stay_off(_Atomic uint32_t *w, uint32_t mine)
{
	uint32_t got = atomic_load(w);

	while (!(got & (FF_RESUME_GO | FF_RESUME_OFF | mine)) &&
	       !atomic_compare_exchange_weak(w, &got, got | FF_RESUME_OFF))
		;
}

/*
 * Meet the peer in the resume word and decide: GO or OFF (the word's
 * decision). Once both hold the connection (each came with its writes
 * with the peer), nothing more comes into either end's queues: each says
 * whether its own are empty (quiet), and GO needs both. Each end came
 * only if not shut down, so the queues are all there is to look at. On
 * TCP, what comes meanwhile is acknowledged at once: the peer's hold
 * waits for that.
 */
static uint32_t meet(_Atomic uint32_t *w, uint32_t mine, uint32_t quiet, int fd, int tcp)
{
	int64_t end = ff_now_ms() + PEER_MS;
	uint32_t got = atomic_fetch_or(w, mine) | mine;

	for (;;) {
		uint32_t exp = got;

		if (got & (FF_RESUME_GO | FF_RESUME_OFF))
			return got & FF_RESUME_OFF ? FF_RESUME_OFF : FF_RESUME_GO;
		if ((got & BOTH) == BOTH && !(got & quiet)) {
			if (queues_empty(fd))
				atomic_fetch_or(w, quiet);
			else
				atomic_compare_exchange_strong(w, &exp, got | FF_RESUME_OFF);
		} else if ((got & QUIET) == QUIET) {
			atomic_compare_exchange_strong(w, &exp, got | FF_RESUME_GO);
		} else if (ff_now_ms() >= end) {
			atomic_compare_exchange_strong(w, &exp, got | FF_RESUME_OFF);
		} else {
			if (tcp)
				ff_real.setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &(int){ 1 }, sizeof(int));
			nanosleep(&(struct timespec){ .tv_nsec = 100000 }, NULL);
		}
		got = atomic_load(w);
	}
}

/*
 * On TCP, for the holds: what Nagle keeps back is sent now (TCP_NODELAY
 * set, then the program's value again), and so is an acknowledgement
 * this end delays (TCP_QUICKACK), which would outlast the peer's hold.
 * SIOCOUTQ then (sent but not acknowledged, or not sent), or -1.
 */
static int tcp_flush(int fd)
{
	int nd = 0, out = -1;
	socklen_t l = sizeof(nd);

	if (ff_real.getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nd, &l) ||
	    ff_real.setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int)) ||
	    ff_real.setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nd, sizeof(nd)) ||
	    ff_real.setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &(int){ 1 }, sizeof(int)) ||
	    ff_real.ioctl(fd, SIOCOUTQ, &out))
		return -1;
	return out;
}

/*
 * Table lock held: hold c (held 1: its writers wait) until its writers are
 * out of the kernel and its readers drained what came (on TCP, parked,
 * until the peer acknowledged what it wrote too: tcp_flush), then
 * every call (held 2) until all left; HOLD_MS in all. 0, or -1 with *why.
 */
static int hold(struct ff_conn *c, int fd, const char **why)
{
	int64_t end = ff_now_ms() + HOLD_MS;
	int in = 0, out = 0, tcp = c->moved == FF_MOVED_PARKED;

	c->held = 1;
	for (;;) {
		if (ff_real.ioctl(fd, SIOCINQ, &in))
			in = -1;
		/* A reader asleep with nothing to read waits for the peer's writers, held too. */
		if (c->readers && !in && !(ff_real.fcntl(fd, F_GETFL) & O_NONBLOCK)) {
			*why = "a reader sleeps on it";
			return -1;
		}
		if (tcp)
			out = tcp_flush(fd);
		if (!c->writers && !in && !out)
			break;
		if (ff_now_ms() >= end) {
			*why = c->writers ? "a writer stays in the kernel on it"
			       : in	  ? "its readers did not read what came"
					  : "the peer did not acknowledge what it wrote";
			return -1;
		}
		ff_table_wait_until(ff_now_ms() + 1 < end ? ff_now_ms() + 1 : end);
	}
	c->held = 2;
	while (c->readers && ff_now_ms() < end)
		ff_table_wait_until(ff_now_ms() + 1 < end ? ff_now_ms() + 1 : end);
	if (c->readers) {
		*why = "a reader stays in the kernel on it";
		return -1;
	}
	if (shut_here(fd, c)) {
		*why = "shut down, or its peer is gone";
		return -1;
	}
	return 0;
}

/* Wait (DONE_MS) for the peer's DONE, or for the peer to be gone: 1 if it said DONE. */
static int await_done(_Atomic uint32_t *w, uint32_t theirs, int fd)
{
	int64_t end = ff_now_ms() + DONE_MS;
	struct pollfd p = { fd, POLLRDHUP, 0 };

	while (!(atomic_load(w) & theirs) && ff_now_ms() < end &&
	       !(ff_real.poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLRDHUP))))
		nanosleep(&(struct timespec){ .tv_nsec = 100000 }, NULL);
	return (atomic_load(w) & theirs) != 0;
}

int ff_shm_resume(const struct ff_park *p, const char **why)
{
	struct ff_epreg *regs[256] = { NULL };
	_Atomic uint32_t *w;
	struct ff_shm *sh = NULL;
	struct ff_conn *c;
	struct stat st;
	uint32_t mine, quiet, said = FF_RESUME_OFF;
	int fds[256], n = 0, fd = -1, old = -1, done = 0, connector = p->role == FF_SHM_CONNECTOR;

	if (ff_shm_open(p->sock, p->role, &sh, why))
		return 0;
	w = ff_shm_word(sh, FF_SHM_OFF_RESUME);
	mine = connector ? FF_RESUME_HELD_CONNECTOR : FF_RESUME_HELD_ACCEPTOR;
	quiet = connector ? FF_RESUME_QUIET_CONNECTOR : FF_RESUME_QUIET_ACCEPTOR;
	ff_table_lock();
	c = find(p, &fd, why);
	if (c && (c->passed || atomic_load(&ff_shm_avoided))) {
		*why = c->passed ? "given where the library cannot follow it" : "the process avoids shm (io_uring)";
		c = NULL;
	} else if (c && (resuming || ff_now_ms() < share_until)) {
		*why = "the process is forking or executing";
		c = NULL;
	}
	if (!c) {
		ff_table_unlock();
		stay_off(w, mine);
		ff_shm_put(sh);
		return 0;
	}
	/* Held, no fd of it is closed or replaced (ff_fd_forget and dup2 wait): c and its fds stay. */
	resuming = 1;
	/* Its fds once held: a dup() during the hold's first part, maybe registered meanwhile, is one. */
	if (hold(c, fd, why) || fstat(fd, &st)) {
		stay_off(w, mine);
	} else if ((n = fds_of(c, fds, (int)(sizeof(fds) / sizeof(fds[0])))) == (int)(sizeof(fds) / sizeof(fds[0]))) {
		*why = "more fds than a move back follows";
		stay_off(w, mine);
	} else {
		/* Unlocked meanwhile: the program's other connections go on. */
		ff_table_unlock();
		/*
		 * Before the meeting: after GO nothing may fail. A parked
		 * connection's TCP socket is kept open until the peer is done:
		 * closed, it would end the peer's, maybe still at its fds.
		 */
		if (find_registrations(fds, n, st.st_ino, regs)) {
			*why = "its epoll registrations could not be read";
			stay_off(w, mine);
		} else if (p->bell >= 0 && (old = ff_real.fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
			*why = "no fd to keep its TCP socket at";
			stay_off(w, mine);
		} else {
			said = meet(w, mine, quiet, fd, old >= 0);
			*why = said == FF_RESUME_GO ? NULL
			       : (atomic_load(w) & BOTH) == BOTH ? "not quiet: bytes in flight"
								 : "its peer did not come in time, or refused";
		}
		if (said == FF_RESUME_GO && !queues_empty(fd)) {
			/* Only a peer lying about its queues gets here: end it rather than lose bytes. */
			ff_real.shutdown(fd, SHUT_RDWR);
			*why = "the peer said GO while bytes were in flight: connection ended";
			said = FF_RESUME_OFF;
		}
		ff_table_lock();
	}
	if (said == FF_RESUME_GO) {
		/*
		 * Before DONE: the peer writes, and rings for pollers asleep
		 * here, only after it. sh is nobody else's yet, so its wait_mu
		 * may be taken under the table lock.
		 */
		if ((c->raw_armed = c->polling > 0))
			ff_shm_raw_arm(sh);
		commit(c, sh, p->bell, fds, n, regs);
		sh = NULL;
		ff_table_unlock();
		/* For the peer's pollers asleep on its TCP socket: its bell is readable when they look (below). */
		if (old >= 0)
			ff_real.send(fd, &(char){ FF_SHM_BELL }, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
		atomic_fetch_or(w, connector ? FF_RESUME_DONE_CONNECTOR : FF_RESUME_DONE_ACCEPTOR);
		done = await_done(w, connector ? FF_RESUME_DONE_ACCEPTOR : FF_RESUME_DONE_CONNECTOR, fd);
		if (old >= 0) {
			/*
			 * A poller asleep on the TCP socket stays on its wait
			 * queue, and when woken looks at what is at its fd now:
			 * the bell, with the peer's doorbell (sent before its
			 * DONE). So it returns, and the shim asks again on shm.
			 * At no fd now, the socket is reset (no TIME_WAIT keeps
			 * the tuple from a later park), but for a peer not done
			 * yet, whose fds it may still be at: an end of stream
			 * there is a program's to read, a reset is not.
			 */
			ff_real.shutdown(old, SHUT_RD);
			if (done)
				ff_real.setsockopt(old, SOL_SOCKET, SO_LINGER, &(struct linger){ 1, 0 },
						   sizeof(struct linger));
			ff_real.close(old);
			old = -1;
		}
		ff_table_lock();
	}
	release(c);
	ff_table_unlock();
	if (old >= 0)
		ff_real.close(old);
	free_registrations(regs, n);
	if (sh)
		ff_shm_put(sh);
	return said == FF_RESUME_GO;
}
