/* SPDX-License-Identifier: MIT */
/*
 * The proc concern: start-up (start.c), fork and vfork (fork.c), the exec
 * family and posix_spawn (exec.c); and the entry helpers every exported
 * function (proc, wait, calls) starts with.
 */
#ifndef FREEFLOW_PROC_H
#define FREEFLOW_PROC_H

#include <stdatomic.h>

#include "core/core.h"
#include "setup/setup.h"

/* ---- start.c: start-up ---- */

/* Resolves ff_real and reads the environment, once; cheap after that. */
void ff_init(void);
/*
 * Whether ff_init has run to its end. Entry points that an allocator takes
 * during its own start-up (jemalloc reads /proc through syscall()) must not
 * start the library, which allocates: before it started, no fd is tracked,
 * so the kernel is the right answer.
 */
int ff_ready(void);

/* ---- fork.c ---- */
void ff_fork_init(void);
/* Whether this is a vfork child, which shares the parent's memory: change nothing. */
int ff_vforked(void);

/* ---- exec.c: swapped connections carried across exec ---- */
/* In the new image, at init (table ready): adopt what the old image described. */
void ff_exec_restore(void);

/*
 * ---- Entry helpers: for exported functions only ----
 * An exported function starts the library (ff_init(), once per process)
 * before it reaches the fd table or ff_real: REAL(fn), ff_slot_enter(fd)
 * or ff_init() comes first. Code below the wrappers never starts the
 * library (ff_fd_slot() does not): it runs after a wrapper did, or on a
 * thread the library started. Built with -DFF_CHECK_INIT (make
 * test-asan), ff_fd_slot() aborts when start-up has not made the table
 * yet, so a path that skips the entry is found, not read as "untracked".
 */

#define REAL(fn) (ff_init(), ff_real.fn)

/* The wrappers: the only symbols libfreeflow.map lets out. */
#define FF_EXPORT __attribute__((visibility("default")))

/* ff_fd_slot() for a wrapper that has not started the library yet. */
static inline struct ff_slot *ff_slot_enter(int fd)
{
	ff_init();
	return ff_fd_slot(fd);
}

/* Before a data call on fd: ff_settle_slow() if its decision is pending, else 0. */
static inline int ff_settle(int fd, int nonblock)
{
	struct ff_slot *s = ff_slot_enter(fd);

	/*
	 * Relaxed is enough: a data call racing with the connect() that sets
	 * PENDING in another thread has no order to respect, and the slow path
	 * re-checks under the table lock.
	 */
	if (!s || !(atomic_load_explicit(&s->flags, memory_order_relaxed) & FF_FD_PENDING))
		return 0;
	return ff_settle_slow(fd, nonblock);
}

#endif
