/* SPDX-License-Identifier: MIT */
/*
 * Each thread's own connection to the agent (PROTOCOL.md allows one request
 * outstanding per connection, so sharing one would need a lock held across
 * the agent's answer; one per thread needs none).
 *
 * - Opened on first use, HELLO done, marked FF_FD_CONTROL in the fd table so
 *   the shim notices when the application closes or dup2()s over it.
 * - fork: the child must not talk on its parent's sessions (replies would go
 *   to whichever process reads first). The atfork child handler closes every
 *   inherited control fd; the pid stored here tells this thread to reconnect.
 * - A thread's session is closed when the thread exits (a pthread key).
 * - After a timeout the thread leaves the agent alone for BACKOFF_MS, so a
 *   wedged agent costs one bounded wait per second, not one per connection.
 * - A session that breaks, or an agent that cannot be reached, may mean the
 *   agent restarted with an empty listener table: the lost hook is called,
 *   and the next session opened (by any thread) calls the opened hook first,
 *   which re-sends LISTEN (start.c passes listeners.c's, which sit above
 *   this file's layer).
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "core/core.h"

/*
 * Must exceed every bound the agents keep inside an answer (PROTOCOL.md,
 * "Timing"): the 50 ms peer wait, its wait of up to 150 ms for an acceptor
 * whose connection is still in its accept queue, and the connector agent's
 * 150 ms budget for a whole cross-host exchange. If the library gave up while its agent
 * is still deciding, one end could get the channel while the other stays
 * on TCP; on a busy 2-core host a scheduling delay of tens of ms is
 * ordinary, so the margin is generous. A silent or wedged agent still
 * costs at most this (then BACKOFF_MS of leaving it alone).
 */
#define AGENT_TIMEOUT_MS	250
#define BACKOFF_MS		1000

struct control {
	struct ff_agent agent;
	pid_t pid;
	int fd;			/* -1: no session */
	int64_t backoff_until;	/* ms, monotonic */
};

static _Thread_local struct control ctl = { .fd = -1 };
static pthread_key_t ctl_key;
static const char *agent_path = FF_AGENT_SOCK_PATH;
static struct ff_session_hooks hooks;

/* Drop the session; its fd is closed only if it is still ours (close_fd). */
static void drop(void)
{
	if (ctl.fd < 0)
		return;
	ff_agent_close(&ctl.agent);
	ctl.fd = -1;
}

static void thread_exit(void *p)
{
	(void)p;
	ff_busy = 1;
	if (ctl.pid == getpid())
		drop();
	ff_busy = 0;
}

void ff_control_init(const struct ff_session_hooks *h)
{
	const char *p = getenv("FREEFLOW_AGENT_SOCKET");

	hooks = *h;
	if (p && *p)
		agent_path = p;
	pthread_key_create(&ctl_key, thread_exit);
}

/* Still ours: same process, and the application has not closed it. */
static int still_valid(void)
{
	struct ff_slot *s;

	if (ctl.fd < 0)
		return 0;
	s = ff_fd_slot(ctl.fd);
	if (ctl.pid != getpid() || !s || !(atomic_load(&s->flags) & FF_FD_CONTROL)) {
		/* The fd number may already be someone else's: never close it here. */
		ctl.fd = -1;
		ctl.agent.fd = -1;
		return 0;
	}
	return 1;
}

/*
 * Connect to the agent, and talk to it only if the kernel says it is one
 * (ff_agent_verify): whatever serves agent_path is handed every byte of
 * every connection it brokers. Containers cannot put a socket there (the
 * directory is a read-only bind), but a mount or FREEFLOW_AGENT_SOCKET set
 * by mistake could. Checked once per session: one getsockopt.
 */
static int connect_agent(struct ff_agent *a)
{
	struct ucred peer;
	int ret = ff_agent_connect(a, agent_path, AGENT_TIMEOUT_MS);

	if (ret)
		return ret;
	ret = ff_agent_verify(a, &peer);
	if (ret == -FF_EUNTRUSTED)
		ff_debug("agent at %s not trusted: served by pid %d, uid %d, as this process sees them; only root outside this container (pid 0 here) is",
			 agent_path, (int)peer.pid, (int)peer.uid);
	if (ret)
		ff_agent_close(a);
	return ret;
}

/*
 * What a failed HELLO means to the caller: the agent's LIMIT (this
 * container holds all the sessions it may) is -FF_ELIMIT, any other ERROR
 * (e.g. DENIED: not a container) -EPERM, a local failure itself.
 */
static int hello_refused(int ret)
{
	if (ret == FF_ERR_LIMIT)
		return -FF_ELIMIT;
	return ret > 0 ? -EPERM : ret;
}

static int open_session(void)
{
	struct ff_hello_info hello;
	int ret;

	ret = connect_agent(&ctl.agent);
	if (ret)
		return ret;
	ret = ff_agent_hello(&ctl.agent, NULL, &hello);
	if (!ret)
		ret = hooks.opened(&ctl.agent);
	if (ret) {
		ff_agent_close(&ctl.agent);
		/* A positive code is the agent's ERROR (e.g. DENIED): not a container. */
		return hello_refused(ret);
	}
	ctl.fd = ctl.agent.fd;
	ctl.pid = getpid();
	ff_fd_mark(ctl.fd, FF_FD_CONTROL);
	ctl.agent.close_fd = ff_fd_close_control;
	pthread_setspecific(ctl_key, &ctl);
	return 0;
}

int ff_control_open_own(struct ff_agent *a, int announce)
{
	struct ff_hello_info hello;
	int ret;

	if (announce)
		hooks.lost();
	ret = connect_agent(a);
	if (!ret && (ret = ff_agent_hello(a, NULL, &hello)) == 0 && announce)
		ret = hooks.opened(a);
	if (ret && a->fd >= 0)
		ff_agent_close(a);
	if (ret)
		return hello_refused(ret);
	ff_fd_mark(a->fd, FF_FD_CONTROL);
	a->close_fd = ff_fd_close_control;
	return 0;
}

uint64_t ff_control_agent_id(void)
{
	struct stat st;

	return stat(agent_path, &st) ? 0 : (uint64_t)st.st_dev << 32 ^ (uint64_t)st.st_ino;
}

int ff_control_own_valid(struct ff_agent *a, pid_t pid)
{
	struct ff_slot *s = a->fd >= 0 ? ff_fd_slot(a->fd) : NULL;

	/* As still_valid(): a number the application took back is not ours to close. */
	if (pid != getpid() || !s || !(atomic_load(&s->flags) & FF_FD_CONTROL))
		a->fd = -1;
	return a->fd >= 0;
}

int ff_control_get(struct ff_agent **out)
{
	int ret;

	if (still_valid()) {
		*out = &ctl.agent;
		return 0;
	}
	if (ctl.backoff_until && ff_now_ms() < ctl.backoff_until)
		return -ETIMEDOUT;
	ret = open_session();
	if (ret == -ETIMEDOUT)
		ctl.backoff_until = ff_now_ms() + BACKOFF_MS;
	if (ret) {
		hooks.lost();
		return ret;
	}
	ctl.backoff_until = 0;
	*out = &ctl.agent;
	return 1;
}

int ff_control_alive(void)
{
	struct ff_agent *a;
	struct pollfd p;
	int ret;

	ff_busy = 1;
	ret = ff_control_get(&a);
	p = (struct pollfd){ .fd = ret == 0 ? a->fd : -1, .events = POLLIN };
	/* The agent sends nothing unasked: a readable session is at EOF, its agent gone. */
	if (ret == 0 && ff_real.poll(&p, 1, 0) != 0) {
		ff_agent_close(a);
		ff_control_broken(-ECONNRESET);
		ret = ff_control_get(&a);	/* a restarted agent: LISTEN and LEDGER again */
	}
	ff_busy = 0;
	return ret >= 0;
}

void ff_control_broken(int err)
{
	/* ff_agent_request closed agent.fd already on transport errors, and unmarked it (close_fd). */
	if (ctl.agent.fd < 0 && ctl.fd >= 0) {
		ctl.fd = -1;
		hooks.lost();
	}
	if (err == -ETIMEDOUT)
		ctl.backoff_until = ff_now_ms() + BACKOFF_MS;
}

/* fork child: close every inherited session (under the table lock of fork.c). */
void ff_control_atfork_child(void)
{
	int hw = ff_table_hiwater();

	for (int fd = 0; fd <= hw; fd++) {
		struct ff_slot *s = ff_fd_slot(fd);

		if (s && (atomic_load(&s->flags) & FF_FD_CONTROL)) {
			ff_real.close(fd);
			atomic_store(&s->flags, 0);
		}
	}
}
