/* SPDX-License-Identifier: MIT */
/*
 * fork and exec.
 *
 * fork: both processes keep every connection. The kernel shares the
 * sockets (swapped or not) between them, and the child inherits the fd
 * table as memory. The handlers below hold the table lock across fork(),
 * so the child's copy is consistent, then in the child:
 *  - close the inherited agent sessions (control.c), so parent and child
 *    never read each other's replies; each child thread reconnects;
 *  - give up on negotiations that a parent thread was running: that thread
 *    does not exist in the child, whose fd stays on the overlay socket;
 *  - re-create the condition variable, which may count waiters that the
 *    child does not have;
 *  - have its first agent session register the inherited listeners in
 *    the child's own name (listeners.c), so they stay known to the agent
 *    if the parent exits (a daemon forking after listen()).
 * vfork/posix_spawn children run no handlers and change nothing the parent
 * sees: they only exec (exec.c, which reads the table and allocates
 * nothing) or _exit.
 *
 * exec: FD_CLOEXEC was kept by the swap, so the kernel closes or keeps each
 * channel as it would have the TCP socket, and LD_PRELOAD in the
 * environment loads the shim into the new image; exec.c hands it the
 * description of the kept swapped fds, so they keep their overlay names
 * and emulated options there.
 */
#include "shim.h"

void ff_table_atfork_child(void);

static void prepare(void)
{
	ff_table_lock();
}

static void parent(void)
{
	ff_table_unlock();
}

static void child(void)
{
	ff_table_atfork_child();
	ff_control_atfork_child();
	ff_listeners_lost();
	ff_table_unlock();
}

void ff_fork_init(void)
{
	pthread_atfork(prepare, parent, child);
}
