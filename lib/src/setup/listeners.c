/* SPDX-License-Identifier: MIT */
/*
 * Keeping the agent's listener table in step with this process.
 *
 * The agent keeps one registration per (container, port, process): LISTEN
 * makes it, UNLISTEN from any thread of that process or the process's exit
 * ends it; it outlives the control session that sent it. Two events make
 * the agent lose ours while the listening sockets live on:
 *  - the agent restarted, with an empty table. The library only sees a
 *    session that breaks (EOF, reset, timeout, a garbled reply) or an agent
 *    it cannot reach for a while (agent/session.c reports both);
 *  - fork: the child's listeners are registered under its parent, and end
 *    with it (a daemon that forks after listen() and lets the parent exit).
 * Either event bumps a process-wide generation. The next session opened,
 * by whichever thread, first re-sends LISTEN for every listening socket
 * this process still has (and its ledger, ledger.c), then carries its own
 * request: so after a
 * restart, the connection on which a process notices is decided on a
 * fresh session, and the connection after it finds the listener back (the
 * one that noticed may take the overlay: its peer may have asked first).
 * While the generation is unchanged a new session costs two atomic loads.
 *
 * A registration is the registering process's own, so a close() sends
 * UNLISTEN only from that process (reg_pid): a forked worker closing its
 * copy of the listener must not withdraw its parent's.
 *
 * A listener the program accepts on through io_uring (routes.c) is
 * withdrawn: the shim never sees those connections, so none of them sends
 * ACCEPT, and a registration would make each connector wait for one. It
 * stays withdrawn for the life of the socket in this process and in
 * children forked after (not re-sent, not carried across exec). Only this
 * process's registration can go: one another process made (the parent of
 * a forked worker, or a worker whose own session registered it) stands
 * until that process withdraws or closes it.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent.h"
#include "core/core.h"
#include "freeflow/proto.h"
#include "links/links.h"
#include "setup/setup.h"

/*
 * lost_gen counts events; synced_gen is the count whose re-send was
 * claimed. The claim is a compare-exchange, so one session re-sends per
 * event even when several threads open sessions at once; an event during
 * a re-send leaves the two unequal, and the next session re-sends again.
 */
static _Atomic unsigned int lost_gen, synced_gen;

void ff_listeners_lost(void)
{
	atomic_fetch_add(&lost_gen, 1);
}

void ff_listener_registered(struct ff_conn *c, int ok)
{
	c->registered = ok;
	if (ok)
		c->reg_pid = getpid();
}

/* The first listener at or above fd: its number and address, or -1. */
static int next_listener(int fd, struct sockaddr_storage *local)
{
	int hw;

	ff_table_lock();
	hw = ff_table_hiwater();
	for (; fd <= hw; fd++) {
		struct ff_conn *c = ff_fd_slot(fd)->conn;

		/* A listener whose listen() has not named it yet announces itself. */
		if (c && c->state == FF_ST_LISTEN && c->ends.local.ss_family && !c->withdrawn) {
			*local = c->ends.local;
			break;
		}
	}
	ff_table_unlock();
	return fd <= hw ? fd : -1;
}

/*
 * Record the agent's answer if fd is still the listener that was
 * announced. 1: it was withdrawn while LISTEN was on its way, so the
 * registration just made must go too.
 */
static int note_answer(int fd, const struct sockaddr_storage *local, int ok)
{
	struct ff_conn *c;
	int undo = 0;

	ff_table_lock();
	c = ff_fd_slot(fd)->conn;
	if (c && c->state == FF_ST_LISTEN && !memcmp(&c->ends.local, local, sizeof(*local))) {
		if (c->withdrawn)
			undo = ok;
		else
			ff_listener_registered(c, ok);
	}
	ff_table_unlock();
	return undo;
}

int ff_listeners_resync(struct ff_agent *a)
{
	unsigned int gen = atomic_load(&lost_gen), seen = atomic_load(&synced_gen);
	struct sockaddr_storage local;

	if (gen == seen || !atomic_compare_exchange_strong(&synced_gen, &seen, gen))
		return 0;
	for (int fd = 0; (fd = next_listener(fd, &local)) >= 0; fd++) {
		int ret = ff_announce_on(a, FF_MSG_LISTEN, &local, NULL);

		/* The session broke: the caller reports it, which bumps lost_gen. */
		if (a->fd < 0)
			return ret < 0 ? ret : -ECONNRESET;
		if (note_answer(fd, &local, ret == 0))
			ff_announce_on(a, FF_MSG_UNLISTEN, &local, NULL);
	}
	return ff_ledger_resend(a);
}

int ff_listening_at(const struct sockaddr_storage *to, int *any_addr)
{
	static const uint8_t any[FF_EP6_LEN];
	struct sockaddr_storage local;
	struct ep t, l;
	int found = 0;

	*any_addr = 0;
	if (to_ep(to, &t))
		return 0;
	for (int fd = 0; (fd = next_listener(fd, &local)) >= 0; fd++) {
		if (to_ep(&local, &l) || !port_eq(&l, &t))
			continue;
		if (ip_eq(&l, &t)) {
			*any_addr = 0;
			return 1;
		}
		if (!memcmp(l.b, any, l.len - 2u))
			found = *any_addr = 1;
	}
	return found;
}

void ff_listener_withdraw(int fd, const char *why)
{
	struct ff_slot *s = ff_fd_slot(fd);
	struct sockaddr_storage local;
	struct ff_conn *c;
	int found = 0, mine = 0;

	if (!s || !(atomic_load_explicit(&s->flags, memory_order_relaxed) & FF_FD_TRACKED))
		return;
	ff_table_lock();
	c = s->conn;
	if (c && c->state == FF_ST_LISTEN && !c->withdrawn) {
		c->withdrawn = found = 1;
		mine = c->registered && c->reg_pid == getpid();
		c->registered = 0;	/* what it accepts is not negotiated, nor carried by exec */
		local = c->ends.local;
		if (!c->app_saves_syn)
			ff_syn_keep(fd, 0);	/* nor read */
	}
	ff_table_unlock();
	if (!found)
		return;
	ff_links_unlisten(&local);	/* offers over a link would wait for an accept() too */
	if (mine)
		ff_announce(FF_MSG_UNLISTEN, &local, NULL);
	ff_fallback(fd, "listener withdrawn from the agent: %s", why);
}
