/* SPDX-License-Identifier: MIT */
/*
 * The SYN mark. Why a mark in the SYN and not a message to the agent: the
 * accepting side must know whether to expect its connector's CONNECT
 * before it waits for it, and a message would cost every connection a
 * round trip (docs/PROTOCOL.md, "The SYN mark", has the argument and what
 * makes the mark safe to trust).
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>

#include "core/core.h"
#include "freeflow/proto.h"
#include "setup/setup.h"

static int tos_option(int level, int name)
{
	return (level == IPPROTO_IP && name == IP_TOS) ||
	       (level == IPPROTO_IPV6 && name == IPV6_TCLASS);
}

static int get_int(int fd, int level, int name, int *v)
{
	socklen_t len = sizeof(*v);

	return ff_real.getsockopt(fd, level, name, v, &len) ? -errno : 0;
}

static int set_int(int fd, int level, int name, int v)
{
	return ff_real.setsockopt(fd, level, name, &v, sizeof(v)) ? -errno : 0;
}

/*
 * Setting IP_TOS also sets SO_PRIORITY from it (rt_tos2priority): the
 * priority the socket had is put back after each TOS change; it is 0,
 * read from no socket, unless the application set these options
 * (c->tos_touched): connects cost two system calls for the mark.
 */
static int set_tos(int fd, const struct ff_conn *c, int tos, int tclass)
{
	int prio = 0, ret, has_prio = !c->tos_touched || !get_int(fd, SOL_SOCKET, SO_PRIORITY, &prio);

	ret = set_int(fd, IPPROTO_IP, IP_TOS, tos);
	if (!ret && c->family == AF_INET6)
		ret = set_int(fd, IPPROTO_IPV6, IPV6_TCLASS, tclass);
	if (has_prio)
		set_int(fd, SOL_SOCKET, SO_PRIORITY, prio);
	return ret;
}

int ff_syn_mark(int fd, struct ff_conn *c)
{
	int ret = 0;

	if (c->syn_marked)
		return 0;
	/* An IPv6 socket may connect to an IPv4-mapped address: the IPv4 TOS goes then. */
	c->app_tos = c->app_tclass = 0;
	if (c->tos_touched)
		ret = get_int(fd, IPPROTO_IP, IP_TOS, &c->app_tos);
	if (!ret && c->tos_touched && c->family == AF_INET6)
		ret = get_int(fd, IPPROTO_IPV6, IPV6_TCLASS, &c->app_tclass);
	if (!ret)
		ret = set_tos(fd, c, FF_SYN_TOS, FF_SYN_TOS);
	if (ret) {
		set_tos(fd, c, c->app_tos, c->app_tclass);
		return ret;
	}
	c->syn_marked = 1;
	return 0;
}

void ff_syn_unmark(int fd, struct ff_conn *c)
{
	if (!c->syn_marked)
		return;
	c->syn_marked = 0;
	set_tos(fd, c, c->app_tos, c->app_tclass);
}

int ff_syn_held_set(struct ff_conn *c, int level, int name, const void *val, socklen_t len)
{
	int v = 0;

	if (tos_option(level, name) || (level == SOL_SOCKET && name == SO_PRIORITY))
		c->tos_touched = 1;
	if (!c->syn_marked || !tos_option(level, name) || (name == IPV6_TCLASS && c->family != AF_INET6))
		return 1;
	/* As the kernel reads them: IP_TOS from one byte on, IPV6_TCLASS an int. */
	if (!val || len < (name == IP_TOS ? 1 : sizeof(int)))
		return -EINVAL;
	if (len >= sizeof(int))
		memcpy(&v, val, sizeof(v));
	else
		v = *(const unsigned char *)val;
	/* As the kernel takes them: TCP owns the ECN bits; a traffic class of -1 is the default. */
	if (name == IPV6_TCLASS && (v < -1 || v > 0xff))
		return -EINVAL;
	v = v < 0 ? 0 : v & FF_SYN_TOS_MASK;
	if (name == IP_TOS)
		c->app_tos = v;
	else
		c->app_tclass = v;
	return 0;
}

int ff_syn_held_get(const struct ff_conn *c, int level, int name, void *val, socklen_t *len)
{
	int v;

	if (!c->syn_marked || !tos_option(level, name) || (name == IPV6_TCLASS && c->family != AF_INET6))
		return 1;
	v = name == IP_TOS ? c->app_tos : c->app_tclass;
	memcpy(val, &v, *len < sizeof(v) ? *len : sizeof(v));
	*len = *len < sizeof(v) ? *len : sizeof(v);
	return 0;
}

void ff_syn_keep(int fd, int keep)
{
	set_int(fd, IPPROTO_TCP, TCP_SAVE_SYN, keep);
}

/*
 * The addresses of the SYN's IP and TCP headers (syn, len bytes) as
 * getsockname/getpeername of the accepted socket give them, in the
 * listener's family (an IPv4 SYN on an AF_INET6 listener v4-mapped); 0,
 * or -1 when it does not say them all (an IPv6 extension header, a
 * link-local address, whose scope only the kernel knows).
 */
static int syn_names(const uint8_t *syn, socklen_t len, int family, struct sockaddr_storage *local,
		     struct sockaddr_storage *remote)
{
	const uint8_t *src, *dst, *tcp;
	struct sockaddr_in6 l6 = { .sin6_family = AF_INET6 }, r6 = { .sin6_family = AF_INET6 };

	if (syn[0] >> 4 == 4 && len >= (socklen_t)(syn[0] & 0x0f) * 4 + 4) {
		src = syn + 12, dst = syn + 16, tcp = syn + (syn[0] & 0x0f) * 4;
		if (family == AF_INET) {
			struct sockaddr_in l = { .sin_family = AF_INET }, r = { .sin_family = AF_INET };

			memcpy(&l.sin_addr, dst, 4), memcpy(&l.sin_port, tcp + 2, 2);
			memcpy(&r.sin_addr, src, 4), memcpy(&r.sin_port, tcp, 2);
			memcpy(local, &l, sizeof(l)), memcpy(remote, &r, sizeof(r));
			return 0;
		}
		l6.sin6_addr.s6_addr[10] = l6.sin6_addr.s6_addr[11] = 0xff;
		r6.sin6_addr.s6_addr[10] = r6.sin6_addr.s6_addr[11] = 0xff;
		memcpy(l6.sin6_addr.s6_addr + 12, dst, 4), memcpy(r6.sin6_addr.s6_addr + 12, src, 4);
	} else if (syn[0] >> 4 == 6 && family == AF_INET6 && len >= 44 && syn[6] == IPPROTO_TCP) {
		src = syn + 8, dst = syn + 24, tcp = syn + 40;
		memcpy(l6.sin6_addr.s6_addr, dst, 16), memcpy(r6.sin6_addr.s6_addr, src, 16);
		if (IN6_IS_ADDR_LINKLOCAL(&l6.sin6_addr) || IN6_IS_ADDR_LINKLOCAL(&r6.sin6_addr))
			return -1;
	} else {
		return -1;
	}
	memcpy(&l6.sin6_port, tcp + 2, 2), memcpy(&r6.sin6_port, tcp, 2);
	memcpy(local, &l6, sizeof(l6)), memcpy(remote, &r6, sizeof(r6));
	return 0;
}

int ff_syn_unmarked(int fd, int family, struct sockaddr_storage *local, struct sockaddr_storage *remote)
{
	uint8_t syn[512];
	socklen_t len = sizeof(syn);
	int tos, unmarked;

	local->ss_family = remote->ss_family = AF_UNSPEC;
	/* Reading the kept SYN also frees it. */
	if (ff_real.getsockopt(fd, IPPROTO_TCP, TCP_SAVED_SYN, syn, &len) || len < 2)
		return 0;
	if (syn[0] >> 4 == 4)
		tos = syn[1];
	else if (syn[0] >> 4 == 6)
		tos = (syn[0] & 0x0f) << 4 | syn[1] >> 4;
	else
		return 0;
	unmarked = (tos & FF_SYN_TOS_MASK) != FF_SYN_TOS;
	if (unmarked && syn_names(syn, len, family, local, remote))
		local->ss_family = remote->ss_family = AF_UNSPEC;
	return unmarked;
}
