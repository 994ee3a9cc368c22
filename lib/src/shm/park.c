/* SPDX-License-Identifier: MIT */
/*
 * The parking thread (docs/SHM.md, "Parking"): before a container moves to
 * another host, its agent parks its shm connections on TCP sockets at
 * their overlay tuples, which CRIU can checkpoint and the overlay carries
 * anywhere. A process that holds an shm connection keeps one thread
 * waiting on a session of its own with WATCH; the agent answers PARK with
 * a connection's endpoints and this end's socket, and the thread parks it
 * (shm/switch.c) then answers with the next WATCH. So a process parks also
 * while the program sleeps or waits on other fds.
 *
 * A thread of the program can find switch_by PARKED before this thread got
 * the socket (the peer parked first): it waits for it here, holding the
 * ring locks, while this thread hands it over under park_mu only.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "core/core.h"
#include "shm/shm.h"

/*
 * How long a thread that found switch_by PARKED waits for its socket: the
 * peer's park takes milliseconds, at most 1 s + 5 s (its own bounds).
 */
#define PARK_WAIT_MS	6000
/* How long a PARK for a connection no fd holds waits for the thread closing it to take its socket. */
#define CLOSING_WAIT_MS	200
/* The parking thread's slice of waiting: how soon it sees its session's number taken, or no shm left. */
#define TICK_MS		1000
/* A session that ended is opened again after this at the latest (a move's hold is 1 min). */
#define AGAIN_MS	60000
/*
 * How often the thread looks for a new agent meanwhile, and first asks one
 * that refused again (then twice as long each time, TICK_MS at most): a
 * restored process meets its new host's agent within about this of its
 * registration, before a move back may need it to park.
 */
#define AGAIN_TICK_MS	50

static pthread_mutex_t park_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t park_cv;
static int cv_ready;
static int running;		/* the thread runs (park_mu) */
static _Atomic int refused;	/* the agent does not know WATCH: never again in this process */
/* The process whose thread runs (or was refused): kicks skip the lock. */
static _Atomic pid_t kicked;
/*
 * The socket for the connection being parked, until some thread takes it:
 * a thread of the program parking it (sh), or one closing it, whose fd is
 * gone already (sh NULL: found by its endpoints).
 */
static struct {
	struct ff_shm *sh;
	struct ff_park at;
	int sock;
} inbox = { NULL, { .sock = -1 }, -1 };

/* The thread runs while the process has shm connections, or connections that may go back to shm. */
static int needed(void)
{
	return atomic_load(&ff_shm_conns) || ff_moved_any();
}

int ff_park_same_ends(const struct ff_ends *e, const struct ff_park *p)
{
	uint8_t l[FF_EP6_LEN], r[FF_EP6_LEN];

	return ff_endpoint(&e->local, l) == p->local_len && ff_endpoint(&e->remote, r) == p->remote_len &&
	       !memcmp(l, p->local, p->local_len) && !memcmp(r, p->remote, p->remote_len);
}

/* park_mu held: whether the inbox holds the socket of sh, or of the connection at ends. */
static int for_me(struct ff_shm *sh, const struct ff_ends *ends)
{
	if (inbox.sock < 0)
		return 0;
	return inbox.sh ? inbox.sh == sh : ends && ff_park_same_ends(ends, &inbox.at);
}

int ff_shm_park_wait(struct ff_shm *sh, const struct ff_ends *ends)
{
	int64_t end = ff_now_ms() + PARK_WAIT_MS;
	int sock = -1;

	pthread_mutex_lock(&park_mu);
	/* No parking thread: nobody will bring one. */
	while (!for_me(sh, ends) && cv_ready && running && ff_now_ms() < end) {
		struct timespec ts = { end / 1000, end % 1000 * 1000000 };

		pthread_cond_timedwait(&park_cv, &park_mu, &ts);
	}
	if (for_me(sh, ends)) {
		sock = inbox.sock;
		inbox.sock = -1;
		pthread_cond_broadcast(&park_cv);	/* the parking thread waits for a closing thread's take */
	}
	pthread_mutex_unlock(&park_mu);
	return sock;
}

/*
 * Table lock taken: the fd and a reference of the shm connection at the
 * wire endpoints of p. Two live connections may share them (a swap freed
 * the first one's overlay port, a later one got it): the moving end takes
 * one not parked yet (or any: ff_shm_park says why not), its peer only
 * the one its header says parked (none: a thread closing it takes the
 * socket), so the two ends pair up by the header they share; the agent
 * parks the next at that tuple only once the peer took this one.
 */
static struct ff_shm *find(const struct ff_park *p, int *at)
{
	uint32_t want = p->adopt ? FF_SHM_PARKED : 0;
	struct ff_shm *sh = NULL;
	int hw, any = -1;

	ff_table_lock();
	hw = ff_table_hiwater();
	for (int fd = 0; fd <= hw; fd++) {
		struct ff_conn *c = ff_fd_slot(fd)->conn;

		if (!c || !c->shm || !ff_park_same_ends(&c->ends, p))
			continue;
		if (atomic_load(c->shm->switch_by) == want) {
			any = fd;
			break;
		}
		if (any < 0 && !p->adopt)
			any = fd;
	}
	if (any >= 0) {
		sh = ff_fd_slot(any)->conn->shm;
		atomic_fetch_add(&sh->refs, 1);
		*at = any;
	}
	ff_table_unlock();
	return sh;
}

/* Put p's socket in the inbox: for sh, or (sh NULL) for a thread closing the connection at p's endpoints. */
static void put(struct ff_shm *sh, const struct ff_park *p)
{
	pthread_mutex_lock(&park_mu);
	inbox.sh = sh;
	inbox.at = *p;
	inbox.sock = p->sock;
	pthread_cond_broadcast(&park_cv);
	pthread_mutex_unlock(&park_mu);
}

/* Wait up to wait_ms for a thread of the program to take the inbox's socket; close it if none did. Whether one did. */
static int take_back(int wait_ms)
{
	int64_t end = ff_now_ms() + wait_ms;
	int taken;

	pthread_mutex_lock(&park_mu);
	while (inbox.sock >= 0 && ff_now_ms() < end) {
		struct timespec ts = { end / 1000, end % 1000 * 1000000 };

		pthread_cond_timedwait(&park_cv, &park_mu, &ts);
	}
	taken = inbox.sock < 0;
	if (!taken)
		ff_real.close(inbox.sock);
	inbox.sh = NULL;
	inbox.sock = -1;
	pthread_mutex_unlock(&park_mu);
	return taken;
}

/* Park the connection p names: 1 parked, 0 not (*why says why). */
static int park_one(struct ff_park *p, const char **why)
{
	int fd = -1, r, taken;
	struct ff_shm *sh = find(p, &fd);
	unsigned st;

	if (!sh) {
		/* Its last fd may be closing: that thread moves what it wrote (ff_shm_closing). */
		put(NULL, p);
		if (take_back(CLOSING_WAIT_MS))
			return 1;
		*why = "no shm connection at that tuple";
		return 0;
	}
	put(sh, p);
	r = ff_shm_park(fd, sh, p->adopt);
	taken = take_back(0);	/* not taken: nothing changed, or the connection was closed meanwhile */
	st = atomic_load(&sh->state);
	ff_shm_put(sh);
	if (!r && taken && (st & FF_SHM_CLOSED) && !(st & FF_SHM_BROKEN))
		return 1;
	*why = r == -EBUSY ? "the peer is moving it down" :
	       r == -EPIPE ? "its peer closed its end: the program has not read it all yet" :
	       r == -ENOENT ? "its peer did not park it" :
	       !r ? "closed before it was parked" : "parking failed: connection reset";
	return 0;
}

/*
 * One WATCH on a and what answers it: 0 when a PARK was handled (*parked,
 * *why say how), 1 when the process has no shm connection left, -1 when
 * the session ended. Waits in TICK_MS slices, looking each time that the
 * program did not take the session's number (a close-all daemon may) and
 * that shm connections are left.
 */
static int watch_once(struct ff_agent *a, pid_t pid, int *parked, const char **why)
{
	int64_t seq = ff_watch_send(a, *parked, *why);
	struct ff_reply r;
	struct ff_park p;
	const struct ff_attr *code;
	int ret;

	if (seq < 0)
		return -1;
	for (;;) {
		if (!ff_control_own_valid(a, pid))
			return -1;
		if (!needed())
			return 1;
		ret = ff_poll_until(a->fd, POLLIN, ff_now_ms() + TICK_MS);
		if (ret < 0)
			return -1;
		if (ret > 0 && ff_control_own_valid(a, pid))
			break;
	}
	if (ff_agent_await(a, (uint32_t)seq, FF_MSG_PARK, &r, 0))
		return -1;
	if (r.msg.type == FF_MSG_ERROR) {
		code = ff_msg_get(&r.msg, FF_ATTR_ERR_CODE);
		ff_reply_close_fds(&r);
		if (code && ff_attr_u32(code) == FF_ERR_UNKNOWN) {
			ff_debug("parking: the agent does not know WATCH; shm connections here cannot be parked");
			refused = 1;
		}
		return -1;
	}
	if (ff_park_read(&r, &p)) {
		*parked = 0;
		*why = "a malformed PARK";
		return 0;
	}
	if (p.role) {
		*parked = ff_shm_resume(&p, why);
		ff_real.close(p.sock);
		if (p.bell >= 0)
			ff_real.close(p.bell);
		ff_debug("resume: %s", *parked ? "back on shm" : *why);
		return 0;
	}
	*parked = park_one(&p, why);
	ff_debug("parking: %s", *parked ? "parked a connection on TCP" : *why);
	return 0;
}

/*
 * While the process has shm connections: a session, WATCH after WATCH.
 * A session that ends (the agent restarted, or closed it for a move) is
 * opened again only once another agent serves the socket's path (a new
 * agent, or, after a move, the destination's, whose directory is bound
 * there), or after AGAIN_MS: never while a move's checkpoint may be under
 * way, which a session to the source's agent would make fail. A new agent
 * that refuses the session (a moved container's processes run before the
 * destination's agent has it) is asked again soon, then less and less
 * often (AGAIN_TICK_MS). The new session sends the listeners and the
 * ledger again, so the new agent knows them before the program's next
 * call.
 */
static void *parker(void *arg)
{
	pid_t pid = getpid();
	uint64_t served = ff_control_agent_id();	/* the agent of the last session (or the first asked) */
	int64_t tick = AGAIN_TICK_MS;
	int announce = 0;

	(void)arg;
	while (!refused && needed()) {
		struct ff_agent a = { .fd = -1 };
		uint64_t agent = ff_control_agent_id();
		int64_t since;
		const char *why = NULL;
		int parked = -1, ret = 0;

		if (!ff_control_open_own(&a, announce)) {
			served = agent;
			tick = AGAIN_TICK_MS;
			while (!(ret = watch_once(&a, pid, &parked, &why)))
				;
			if (ff_control_own_valid(&a, pid))
				ff_agent_close(&a);
			if (ret > 0)
				break;
		}
		if (agent != served)	/* a new agent refused it */
			tick = tick * 2 < TICK_MS ? tick * 2 : TICK_MS;
		since = ff_now_ms();
		do
			nanosleep(&(struct timespec){ .tv_sec = tick / 1000, .tv_nsec = tick % 1000 * 1000000L }, NULL);
		while (!refused && needed() && ff_now_ms() - since < AGAIN_MS &&
		       ((agent = ff_control_agent_id()) == served || !agent));
		announce = 1;
	}
	pthread_mutex_lock(&park_mu);
	running = 0;
	if (!refused)
		atomic_store(&kicked, 0);
	pthread_mutex_unlock(&park_mu);
	/*
	 * A connection made since the last look kicked while kicked still
	 * said running (its count before its kick's load, as kicked's store
	 * before this load): start anew for it.
	 */
	if (!refused && needed())
		ff_shm_parker_kick();
	return NULL;
}

void ff_shm_parker_kick(void)
{
	if (atomic_load(&kicked) == getpid())
		return;
	pthread_mutex_lock(&park_mu);
	if (!cv_ready) {
		ff_cond_init_monotonic(&park_cv);
		cv_ready = 1;
	}
	if (!running && !refused)
		running = ff_start_quiet_thread(parker);
	if (running || refused)
		atomic_store(&kicked, getpid());
	pthread_mutex_unlock(&park_mu);
}

void ff_shm_parker_atfork_child(void)
{
	/* Threads do not fork: the child starts its own with its first shm connection. */
	pthread_mutex_init(&park_mu, NULL);
	running = 0;
	inbox.sh = NULL;
	if (inbox.sock >= 0)
		ff_real.close(inbox.sock);	/* the parent's to use */
	inbox.sock = -1;
	if (cv_ready)
		ff_cond_init_monotonic(&park_cv);
}
