/* SPDX-License-Identifier: MIT */
/*
 * Library start-up: resolve libc's real functions (real.c), read the
 * environment, set up the fd table, the agent sessions and the fork
 * handlers.
 *
 * Nothing runs from a constructor: the first wrapped call of any thread runs
 * ff_init() through pthread_once, so start-up order against other preloaded
 * libraries (sanitizers) does not matter. ff_init() itself must call no
 * wrapped function, or pthread_once would wait on itself.
 */
#include "agent/agent.h"
#include "core/core.h"
#include "proc/proc.h"
#include "setup/setup.h"
#include "shm/shm.h"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static atomic_int initialized;
/*
 * A new agent session brings the agent's listener table in step
 * (listeners.c) and, on the first, gets the ledger before any request.
 */
static int session_opened(struct ff_agent *a)
{
	int ret = ff_listeners_resync(a);

	if (!ret && a->fd >= 0) {
		ff_ledger_first(a);
		if (a->fd < 0)
			ret = -ECONNRESET;	/* sending it broke the session, as resync reports */
	}
	return ret;
}

static const struct ff_session_hooks session_hooks = {
	.lost = ff_listeners_lost,
	.opened = session_opened,
};

void ff_table_init(void);
void ff_log_init(void);

static void init_once_fn(void)
{
	ff_real_resolve();
	ff_log_init();
	ff_shm_init();
	ff_table_init();
	ff_exec_restore();
	ff_control_init(&session_hooks);
	ff_fork_init();
	atomic_store_explicit(&initialized, 1, memory_order_release);
}

int ff_ready(void)
{
	return atomic_load_explicit(&initialized, memory_order_acquire);
}

void ff_init(void)
{
	pthread_once(&init_once, init_once_fn);
}
