/* SPDX-License-Identifier: MIT */
/*
 * Socket options on a swapped connection, so the application cannot tell.
 *
 * A host-tcp channel is a real TCP socket: its options are native, except
 * that IP-level options of the other family are emulated when the
 * application's connection was IPv6 and the fabric is IPv4 (or back).
 * A unix channel has no TCP or IP level at all; there:
 *  - SOL_SOCKET options are native (SO_RCVBUF/SO_SNDBUF, SO_KEEPALIVE,
 *    SO_ERROR, SO_RCVTIMEO, SO_LINGER, ... all exist on AF_UNIX), except
 *    SO_DOMAIN, which answers the overlay family, SO_PROTOCOL, which
 *    answers IPPROTO_TCP, and SO_RCVBUF/SO_SNDBUF the application did not
 *    set, which read as an unconnected TCP socket's (tcp_like_size);
 *  - IPPROTO_TCP / IPPROTO_IP / IPPROTO_IPV6 int options are stored on set
 *    and returned on get (defaults: Linux's for a fresh connection), so
 *    TCP_NODELAY, TCP_KEEPIDLE, IP_TOS and friends "stick" although they do
 *    nothing (there is no Nagle, no keepalive probe, no TTL on AF_UNIX);
 *  - TCP_INFO is synthesized: state ESTABLISHED, loopback-like sizes,
 *    counters zero; TCP_CONGESTION answers "cubic".
 * What a swap carries over, and the stored options themselves: opts.c.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/time.h>

#include "core/core.h"
#include "proc/proc.h"
#include "setup/setup.h"

/*
 * The buffer sizes the application chose (opts.c says why): before the
 * decision, and on a unix or shm channel (tcp_like_size).
 */
static int app_set_size(const struct ff_conn *c, int level, int name)
{
	return (c->state == FF_ST_SOCKET || c->state == FF_ST_PENDING ||
		c->state == FF_ST_LISTEN || (c->state == FF_ST_SWAPPED && c->kern_family == AF_UNIX)) &&
	       level == SOL_SOCKET && (name == SO_RCVBUF || name == SO_SNDBUF);
}

/* Whether (level) is emulated for this conn. */
static int emulated(const struct ff_conn *c, int level)
{
	if (level == IPPROTO_TCP)
		return c->kern_family == AF_UNIX;
	if (level == IPPROTO_IP || level == IPPROTO_IPV6)
		return c->kern_family != c->family;
	return 0;
}

static void fill_tcp_info(struct tcp_info *ti)
{
	memset(ti, 0, sizeof(*ti));
	ti->tcpi_state = TCP_ESTABLISHED;
	ti->tcpi_rto = 200000;
	ti->tcpi_ato = 40000;
	ti->tcpi_snd_mss = ti->tcpi_rcv_mss = ti->tcpi_advmss = 65483;
	ti->tcpi_pmtu = 65535;
	ti->tcpi_rtt = 10;
	ti->tcpi_rttvar = 5;
	ti->tcpi_snd_ssthresh = 0x7fffffff;
	ti->tcpi_snd_cwnd = 10;
	ti->tcpi_rcv_space = 65483;
}

static void put_out(void *val, socklen_t *len, const void *src, socklen_t n)
{
	memcpy(val, src, n < *len ? n : *len);
	*len = n < *len ? n : *len;
}

/*
 * SO_SNDBUF or SO_RCVBUF of an unconnected TCP socket here (tcp_wmem and
 * tcp_rmem's middle values), read once. No lock: racing threads store the
 * same value, and a fork child copies no lock held.
 */
static int tcp_size(int name)
{
	static _Atomic int size[2];
	int n = name != SO_SNDBUF, v = atomic_load(&size[n]), s;
	socklen_t l = sizeof(v);

	if (v)
		return v;
	s = ff_real.socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s >= 0 && !ff_real.getsockopt(s, SOL_SOCKET, name, &v, &l))
		atomic_store(&size[n], v);
	if (s >= 0)
		ff_real.close(s);
	return atomic_load(&size[n]);
}

/*
 * A unix or shm channel's buffer sizes are the agent's (PROTOCOL.md, the
 * unix channel's buffers), tens of MiB, which a program sizing its own
 * buffers by them would copy: unless the program set the size, it reads
 * what an unconnected TCP socket has (what a connection starts from).
 */
static int tcp_like_size(struct ff_conn *c, int level, int name)
{
	return c->kern_family == AF_UNIX && level == SOL_SOCKET &&
	       (name == SO_SNDBUF || name == SO_RCVBUF) && !ff_sockopt_app_set(c, level, name);
}

/* Table lock held; returns 1 when the real call should answer. */
static int get_locked(struct ff_conn *c, int level, int name, void *val, socklen_t *len)
{
	struct ff_opt *o;
	int v;

	if (tcp_like_size(c, level, name) && (v = tcp_size(name)) > 0) {
		put_out(val, len, &v, sizeof(v));
		return 0;
	}
	if (level == SOL_SOCKET && (name == SO_DOMAIN || name == SO_PROTOCOL)) {
		v = name == SO_DOMAIN ? c->family : IPPROTO_TCP;
		put_out(val, len, &v, sizeof(v));
		return 0;
	}
	if (!emulated(c, level))
		return 1;
	if (level == IPPROTO_TCP && name == TCP_INFO) {
		struct tcp_info ti;

		fill_tcp_info(&ti);
		put_out(val, len, &ti, sizeof(ti));
		return 0;
	}
	if (level == IPPROTO_TCP && name == TCP_CONGESTION) {
		put_out(val, len, "cubic", 6);
		return 0;
	}
	o = ff_opt_find(c, level, name, 0);
	v = o ? o->value : ff_opt_default(level, name);
	put_out(val, len, &v, sizeof(v));
	return 0;
}

static int saves_syn(int level, int name)
{
	return level == IPPROTO_TCP && name == TCP_SAVE_SYN;
}

/*
 * Table lock held, c not swapped: what the shim holds for the application
 * (synmark.c): its IP_TOS / IPV6_TCLASS while the SYN is marked, its
 * TCP_SAVE_SYN, which the shim sets on every listener. 1: ask the kernel.
 */
static int get_held(struct ff_conn *c, int level, int name, void *val, socklen_t *len)
{
	if (saves_syn(level, name) && (c->state == FF_ST_SOCKET || c->state == FF_ST_LISTEN)) {
		put_out(val, len, &c->app_saves_syn, sizeof(int));
		return 0;
	}
	return ff_syn_held_get(c, level, name, val, len);
}

/* Table lock held: 1 when the real call should answer. */
static int sockopt_get(struct ff_conn *c, int level, int name, void *val, socklen_t *len)
{
	if (!c || !val || !len)
		return 1;
	if (c->state == FF_ST_SWAPPED)
		return get_locked(c, level, name, val, len);
	return get_held(c, level, name, val, len);
}

/* Table lock held: 1 when the real call should set it, 0 done, -errno. */
static int sockopt_set(struct ff_conn *c, int level, int name, const void *val, socklen_t len)
{
	struct ff_opt *o;
	int ret = 1, v = 0;

	if (c)
		c->opts_set |= ff_opt_carried(level, name);
	if (c && app_set_size(c, level, name) && val && len >= sizeof(int) &&
	    (o = ff_opt_find(c, level, name, 1)))
		memcpy(&o->value, val, sizeof(int));	/* and the real call sets it */
	/* A SYN the application keeps for itself is not the shim's to read (it would be gone). */
	if (c && saves_syn(level, name) && val && len >= sizeof(int))
		c->app_saves_syn = *(const int *)val;
	/* Its SYN may leave only at its first write (synmark.c): never negotiated. */
	if (c && level == IPPROTO_TCP && name == TCP_FASTOPEN_CONNECT && val && len >= sizeof(int))
		c->fastopen = *(const int *)val != 0;
	if (c && c->state != FF_ST_SWAPPED)
		ret = ff_syn_held_set(c, level, name, val, len);
	if (c && c->state == FF_ST_SWAPPED && emulated(c, level)) {
		ret = 0;
		if (val && len >= sizeof(int))
			memcpy(&v, val, sizeof(v));
		else if (val && len >= 1)
			v = *(const unsigned char *)val;
		else
			ret = -EINVAL;
		/* Non-int options (TCP_CONGESTION, ...) are accepted and ignored. */
		if (!ret && (o = ff_opt_find(c, level, name, 1)))
			o->value = v;
	}
	return ret;
}

/*
 * The table lock held and no decision in progress for s's fd, if tracked
 * (else NULL, no lock): while its connect is pending, another thread (the
 * settler) may swap it, and the option must land on the socket the swap
 * carries options from, or be emulated after, not in between.
 */
static struct ff_conn *lock_settled(struct ff_slot *s)
{
	if (!s || !(atomic_load(&s->flags) & FF_FD_TRACKED))
		return NULL;
	ff_table_lock();
	if (ff_conn_settled(s))
		return s->conn;
	ff_table_unlock();
	return NULL;
}

FF_EXPORT int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	struct ff_conn *c;
	int ret;

	if (ff_busy)
		return REAL(getsockopt)(fd, level, name, val, len);
	if (level == SOL_SOCKET && name == SO_ERROR) {
		struct ff_slot *s = ff_slot_enter(fd);

		/*
		 * The usual way to learn a non-blocking connect completed: decide
		 * now. A reset may be the acceptor's own: it took this end's link
		 * offer, went to the fast path and reset its TCP end before this
		 * end looked. Decided on the fast path, the connection has no error.
		 */
		if (s && (atomic_load(&s->flags) & FF_FD_PENDING)) {
			ret = REAL(getsockopt)(fd, level, name, val, len);
			if (ret == 0 && val && (*(int *)val == 0 || *(int *)val == ECONNRESET)) {
				ff_settle(fd, 1);
				if (atomic_load(&s->flags) & FF_FD_SWAPPED)
					*(int *)val = 0;
			}
			return ret;
		}
	}
	if (!(c = lock_settled(ff_slot_enter(fd))))
		return REAL(getsockopt)(fd, level, name, val, len);
	ret = sockopt_get(c, level, name, val, len);
	if (ret == 1)
		ret = REAL(getsockopt)(fd, level, name, val, len) ? -errno : 0;
	ff_table_unlock();
	if (ret < 0) {
		errno = -ret;
		return -1;
	}
	return 0;
}

FF_EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	struct ff_conn *c;
	int ret;

	if (ff_busy || !(c = lock_settled(ff_slot_enter(fd))))
		return REAL(setsockopt)(fd, level, name, val, len);
	ret = sockopt_set(c, level, name, val, len);
	if (ret == 1)
		ret = REAL(setsockopt)(fd, level, name, val, len) ? -errno : 0;
	ff_table_unlock();
	if (ret < 0) {
		errno = -ret;
		return -1;
	}
	return 0;
}
