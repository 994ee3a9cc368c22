/* SPDX-License-Identifier: MIT */
/*
 * fork, vfork and exec (at length: docs/LIBRARY.md, "fork" and "vfork,
 * posix_spawn and the spawns past the wrappers").
 *
 * fork: both processes keep every connection, but an shm connection is
 * never shared between processes (docs/SHM.md, "Moving down"): the prepare
 * handler moves every one down, then takes the table lock, checking under
 * it that no new one appeared meanwhile (ff_shm_switch_all). The lock is
 * held across fork(), so the child's copy of the table is consistent; the
 * child then closes the inherited agent sessions (agent/session.c), gives up the
 * negotiations of parent threads it does not have (their fds stay on the
 * overlay) and the settler's watch list (settler.c, whose own decisions the
 * prepare handler waits for, bounded), re-creates the condition variable,
 * and registers the inherited listeners in its own name at its first agent
 * session (listeners.c).
 *
 * vfork runs no fork handlers and its child shares the parent's memory, so
 * the wrapper moves every shm connection down in the parent, then enters
 * the real vfork by a tail jump (x86-64, AArch64; elsewhere vfork is fork).
 * In the child the exec wrappers move nothing down (ff_vforked).
 *
 * exec: FD_CLOEXEC was kept by the swap and LD_PRELOAD loads the shim into
 * the new image; exec.c moves down the shm connections the new image keeps
 * and describes the kept swapped fds to it.
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
	ff_contacts_atfork_prepare();
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
	ff_contacts_atfork_parent();
	ff_shm_spill_atfork_parent();
}

static void child(void)
{
	self = getpid();
	ff_links_atfork_child();
	ff_shm_spill_atfork_child();	/* after: the links' channels are dropped with the rest */
	ff_shm_parker_atfork_child();
	ff_contacts_atfork_child();
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
