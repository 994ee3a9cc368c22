/* SPDX-License-Identifier: MIT */
/*
 * fork, vfork and exec.
 *
 * fork: both processes keep every connection. A shared-memory connection
 * must never be shared between processes (docs/SHM.md, "Moving down"), so
 * the prepare handler first moves every one down to a kernel channel, then
 * takes the table lock, checking under it that no new one appeared
 * meanwhile (ff_shm_switch_all). The kernel then shares the sockets between
 * the two processes, and the child inherits the fd table as memory. The
 * table lock is held across fork(), so the child's copy is consistent; then
 * in the child:
 *  - close the inherited agent sessions (control.c), so parent and child
 *    never read each other's replies; each child thread reconnects;
 *  - give up on negotiations that a parent thread was running: that thread
 *    does not exist in the child, whose fd stays on the overlay socket; so
 *    does the settler thread, whose watch list is dropped (settler.c); the
 *    settler's own decisions, which the program did not ask for, are
 *    waited for in the prepare handler instead (a bounded wait), and none
 *    starts until the fork is done;
 *  - re-create the condition variable, which may count waiters that the
 *    child does not have;
 *  - have its first agent session register the inherited listeners in
 *    the child's own name (listeners.c), so they stay known to the agent
 *    if the parent exits (a daemon forking after listen()).
 *
 * vfork runs no fork handlers, and its child shares the parent's memory:
 * nothing done there may change what the parent sees. So vfork is wrapped
 * to move every shm connection down in the parent first, then enter the
 * real vfork as if the program had called it (a tail jump: a vfork child
 * must not return through a frame the parent still needs). In the child,
 * the exec wrappers move nothing down (ff_vforked): a connection another
 * parent thread finished in between stays shm in the parent, and is not
 * described to the new image (exec.c). Where no tail jump is written
 * (architectures other than x86-64 and AArch64), vfork is fork, which
 * POSIX allows. posix_spawn's own child (a vfork-like clone) calls libc's
 * internal execve: the posix_spawn wrapper moves down in the parent.
 * libc-internal spawns (system, popen) and _Fork or clone go past the
 * wrappers: an shm fd they pass on stays shm in the parent, and the child
 * gets a bell socket it cannot use (a documented limit).
 *
 * exec: FD_CLOEXEC was kept by the swap, so the kernel closes or keeps each
 * channel as it would have the TCP socket, and LD_PRELOAD in the
 * environment loads the shim into the new image; exec.c moves down the shm
 * connections the new image keeps and hands it the description of the kept
 * swapped fds, so they keep their overlay names and emulated options there.
 */
#include <unistd.h>

#include "agent/agent.h"
#include "core/core.h"
#include "links/links.h"
#include "proc/proc.h"
#include "setup/setup.h"
#include "shm/shm.h"

void ff_table_atfork_child(void);

/* This process, as the fork handlers know it: a vfork child is another pid. */
static pid_t self;

static void prepare(void)
{
	ff_settler_atfork_prepare();
	ff_ledger_atfork_prepare();
	ff_links_atfork_prepare();
	ff_shm_switch_all(FF_SHM_SWITCH_LOCK);
	ff_shm_spill_atfork_prepare();	/* after: a move down may queue a channel */
	ff_ledger_atfork_locked();
}

static void parent(void)
{
	ff_table_unlock();
	ff_settler_atfork_parent();
	ff_ledger_atfork_parent();
	ff_links_atfork_parent();
	ff_shm_spill_atfork_parent();
}

static void child(void)
{
	self = getpid();
	ff_shm_spill_atfork_child();
	ff_links_atfork_child();
	ff_ledger_atfork_child();
	ff_settler_atfork_child();
	ff_table_atfork_child();
	for (int fd = 0, hw = ff_table_hiwater(); fd <= hw; fd++) {
		struct ff_conn *c = ff_fd_slot(fd)->conn;

		if (c && c->offer) {	/* the parent's to settle or withdraw */
			ff_offer_forget(c->offer);
			c->offer = NULL;
		}
		if (c && c->state == FF_ST_NEGOTIATING) {
			ff_syn_unmark(fd, c);
			ff_conn_set_state(c, FF_ST_OVERLAY);
			/* The parent's negotiating thread held a reference. */
			c->refs--;
		}
	}
	ff_control_atfork_child();
	ff_listeners_lost();
	ff_table_unlock();
}

void ff_fork_init(void)
{
	self = getpid();
	pthread_atfork(prepare, parent, child);
}

int ff_vforked(void)
{
	return getpid() != self;
}

/* The vfork entry's first step (below): returns libc's vfork to jump to. */
__attribute__((used)) void *ff_vfork_prepare(void)
{
	ff_init();
	ff_shm_switch_all(0);
	return (void *)ff_real.vfork;
}

#if defined(__x86_64__)
__asm__(".text\n"
	".globl vfork\n"
	".type vfork, @function\n"
	"vfork:\n"
	".cfi_startproc\n"
	"	endbr64\n"
	"	subq $8, %rsp\n"		/* the ABI's 16-byte alignment at the call */
	".cfi_adjust_cfa_offset 8\n"
	"	call ff_vfork_prepare\n"
	"	addq $8, %rsp\n"
	".cfi_adjust_cfa_offset -8\n"
	"	jmp *%rax\n"
	".cfi_endproc\n"
	".size vfork, .-vfork\n");
#elif defined(__aarch64__)
__asm__(".text\n"
	".globl vfork\n"
	".type vfork, %function\n"
	"vfork:\n"
	".cfi_startproc\n"
	"	hint 34\n"			/* bti c */
	"	stp x29, x30, [sp, #-16]!\n"
	".cfi_def_cfa_offset 16\n"
	".cfi_offset 29, -16\n"
	".cfi_offset 30, -8\n"
	"	mov x29, sp\n"
	"	bl ff_vfork_prepare\n"
	"	ldp x29, x30, [sp], #16\n"
	".cfi_restore 29\n"
	".cfi_restore 30\n"
	".cfi_def_cfa_offset 0\n"
	"	mov x16, x0\n"			/* a call-like branch, as BTI wants */
	"	br x16\n"
	".cfi_endproc\n"
	".size vfork, .-vfork\n");
#else
FF_EXPORT pid_t vfork(void)
{
	ff_vfork_prepare();
	return fork();
}
#endif
