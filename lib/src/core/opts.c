/* SPDX-License-Identifier: MIT */
/*
 * The socket options a connection carries across its swap, and those kept
 * in its conn (sockopt.c emulates what a unix channel lacks with them).
 *
 * Options the application set on the TCP socket before the swap are carried
 * over: SOL_SOCKET timeouts, linger, keepalive natively; TCP-level ints as
 * stored values on a unix channel, natively on a host-tcp one. TCP_NODELAY
 * and the keepalive settings are always copied, whatever their value: the
 * agent's own choice on a host-tcp socket (Go sets TCP_NODELAY and
 * keepalive by default) must not change how the application's connection
 * behaves. SO_RCVBUF/SO_SNDBUF are copied only when the application set
 * them (on the socket, or on the listener an accepted one inherits them
 * from, as TCP does): setting one locks the size and turns off the
 * kernel's autotuning, which a copy of a default value would do silently.
 * They are remembered at setsockopt time, as "app-set" entries in the
 * conn's option list, because the kernel cannot say whether a size was
 * set or is the default.
 */
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "core/core.h"

static const int carried_tcp[] = {
	TCP_NODELAY, TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT, TCP_USER_TIMEOUT,
	TCP_CORK, TCP_QUICKACK,
};
static const int carried_sol[] = {
	SO_RCVTIMEO, SO_SNDTIMEO, SO_LINGER, SO_KEEPALIVE, SO_RCVLOWAT, SO_RCVBUF, SO_SNDBUF,
};

#define LEN(a)	(sizeof(a) / sizeof((a)[0]))

_Static_assert(LEN(carried_sol) + LEN(carried_tcp) <= 32, "a carried option's bit must fit opts_set");

/* Bit i + first for names[i] == name, or 0. */
static unsigned listed(const int *names, size_t n, int name, unsigned first)
{
	for (size_t i = 0; i < n; i++)
		if (names[i] == name)
			return 1u << (i + first);
	return 0;
}

/* Option (level, name)'s bit if a swap carries it over (SO_REUSEADDR, for one, has no use after). */
unsigned ff_opt_carried(int level, int name)
{
	if (level == SOL_SOCKET)
		return listed(carried_sol, LEN(carried_sol), name, 0);
	if (level == IPPROTO_TCP)
		return listed(carried_tcp, LEN(carried_tcp), name, LEN(carried_sol));
	return 0;
}

int ff_opt_default(int level, int name)
{
	if (level == IPPROTO_TCP) {
		switch (name) {
		case TCP_MAXSEG:	return 65483;	/* loopback MTU */
		case TCP_KEEPIDLE:	return 7200;
		case TCP_KEEPINTVL:	return 75;
		case TCP_KEEPCNT:	return 9;
		case TCP_SYNCNT:	return 6;
		case TCP_QUICKACK:	return 1;
		}
	}
	if ((level == IPPROTO_IP && name == IP_TTL) ||
	    (level == IPPROTO_IPV6 && name == IPV6_UNICAST_HOPS))
		return 64;
	return 0;
}

struct ff_opt *ff_opt_find(struct ff_conn *c, int level, int name, int add)
{
	for (int i = 0; i < c->nopts; i++)
		if (c->opts[i].level == level && c->opts[i].name == name)
			return &c->opts[i];
	if (!add || c->nopts == FF_MAX_OPTS)
		return NULL;
	c->opts[c->nopts] = (struct ff_opt){ level, name, ff_opt_default(level, name) };
	return &c->opts[c->nopts++];
}

/* Table lock held: c was accepted on listener l; TCP copies l's buffer sizes. */
void ff_sockopt_inherit(struct ff_conn *c, const struct ff_conn *l)
{
	c->opts_set = l->opts_set;	/* the kernel copies the listener's options */
	for (int i = 0; i < l->nopts && c->nopts < FF_MAX_OPTS; i++)
		if (l->opts[i].level == SOL_SOCKET)
			c->opts[c->nopts++] = l->opts[i];
}

/*
 * Whether a swap onto c's kernel socket carries option (level, name): a
 * host-tcp socket takes every one (the agent set TCP_NODELAY and keepalive
 * its own way); a socket pair, only what the application set.
 */
static int wanted(const struct ff_conn *c, int level, int name)
{
	return c->kern_family != AF_UNIX || (c->opts_set & ff_opt_carried(level, name));
}

/* Table lock held, before the dup3 of the swap. */
void ff_sockopt_carry(int oldfd, int newfd, struct ff_conn *c)
{
	char v[32];
	socklen_t len;

	/*
	 * A socket pair's options start as a TCP socket's do, and the TCP
	 * options are only emulated when they differ from the defaults: only
	 * those the application set are carried (an event loop sets
	 * TCP_NODELAY on every connection; reading the other 11 cost some 20
	 * system calls on every connection's setup). A host-tcp socket
	 * is made with the kernel's defaults too, but for TCP_NODELAY, which
	 * the agents set (and the links' stock has on), so only that goes back.
	 */
	if (!c->opts_set && c->kern_family == AF_UNIX)
		return;
	if (!c->opts_set) {
		static const int off = 0;

		ff_real.setsockopt(newfd, IPPROTO_TCP, TCP_NODELAY, &off, sizeof(off));
		return;
	}
	/* The sizes only as the application set them (the top says why): from c->opts. */
	for (size_t i = 0; i < LEN(carried_sol); i++) {
		len = sizeof(v);
		if (carried_sol[i] != SO_RCVBUF && carried_sol[i] != SO_SNDBUF &&
		    wanted(c, SOL_SOCKET, carried_sol[i]) &&
		    ff_real.getsockopt(oldfd, SOL_SOCKET, carried_sol[i], v, &len) == 0)
			ff_real.setsockopt(newfd, SOL_SOCKET, carried_sol[i], v, len);
	}
	for (size_t i = 0; i < LEN(carried_tcp); i++) {
		int val;
		struct ff_opt *o;

		len = sizeof(val);
		if (!wanted(c, IPPROTO_TCP, carried_tcp[i]) ||
		    ff_real.getsockopt(oldfd, IPPROTO_TCP, carried_tcp[i], &val, &len))
			continue;
		if (c->kern_family != AF_UNIX)
			ff_real.setsockopt(newfd, IPPROTO_TCP, carried_tcp[i], &val, len);
		/*
		 * Kept as the socket has it now (a parked one's back to shm:
		 * what the program set meanwhile). TCP_QUICKACK reads back 1
		 * whenever the kernel is in quick-ack mode (a move back puts it
		 * there, shm/resume.c): that 1 is not the program's.
		 */
		else if ((o = ff_opt_find(c, IPPROTO_TCP, carried_tcp[i],
					  val != ff_opt_default(IPPROTO_TCP, carried_tcp[i]))) &&
			 (carried_tcp[i] != TCP_QUICKACK || val != ff_opt_default(IPPROTO_TCP, TCP_QUICKACK)))
			o->value = val;
	}
	for (int i = 0; i < c->nopts; i++)
		if (c->opts[i].level == SOL_SOCKET)
			ff_real.setsockopt(newfd, SOL_SOCKET, c->opts[i].name, &c->opts[i].value,
					   sizeof(int));
}

void ff_sockopt_to_tcp(const struct ff_conn *c, int newfd)
{
	for (int i = 0; i < c->nopts; i++)
		if (c->opts[i].level == IPPROTO_TCP && ff_opt_carried(IPPROTO_TCP, c->opts[i].name))
			ff_real.setsockopt(newfd, IPPROTO_TCP, c->opts[i].name, &c->opts[i].value,
					   sizeof(int));
}

int ff_sockopt_app_set(struct ff_conn *c, int level, int name)
{
	return ff_opt_find(c, level, name, 0) != NULL;
}
