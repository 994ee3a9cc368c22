/* SPDX-License-Identifier: MIT */
/*
 * Addresses and sockets as the library names them: the wire's endpoint
 * bytes, loopback (never negotiated), and what kind of socket an fd is.
 * Core helpers: the agent requests, the ledger, links and shm all use them.
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "freeflow/proto.h"

/*
 * IPv4-mapped IPv6 addresses (a dual-stack listener) are sent as IPv4
 * endpoints, so both ends name one connection with the same bytes.
 */
int ff_endpoint(const struct sockaddr_storage *sa, uint8_t out[18])
{
	const struct sockaddr_in *in = (const void *)sa;
	const struct sockaddr_in6 *in6 = (const void *)sa;

	if (sa->ss_family == AF_INET) {
		memcpy(out, &in->sin_addr, 4);
		memcpy(out + 4, &in->sin_port, 2);
		return FF_EP4_LEN;
	}
	if (sa->ss_family != AF_INET6)
		return -EAFNOSUPPORT;
	if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
		memcpy(out, &in6->sin6_addr.s6_addr[12], 4);
		memcpy(out + 4, &in6->sin6_port, 2);
		return FF_EP4_LEN;
	}
	memcpy(out, &in6->sin6_addr, 16);
	memcpy(out + 16, &in6->sin6_port, 2);
	return FF_EP6_LEN;
}

int ff_endpoint_as_is(const struct sockaddr_storage *sa, uint8_t out[18])
{
	const struct sockaddr_in6 *in6 = (const void *)sa;

	if (sa->ss_family != AF_INET6)
		return ff_endpoint(sa, out);
	memcpy(out, &in6->sin6_addr, 16);
	memcpy(out + 16, &in6->sin6_port, 2);
	return FF_EP6_LEN;
}

/*
 * FREEFLOW_NEGOTIATE_LOOPBACK=1 asks about loopback too: the library's own
 * tests run their fake agent on loopback. Read once, at the first ask.
 */
static pthread_once_t loopback_once = PTHREAD_ONCE_INIT;
static int negotiate_loopback;

static void loopback_init(void)
{
	const char *v = getenv("FREEFLOW_NEGOTIATE_LOOPBACK");

	negotiate_loopback = v && !strcmp(v, "1");
}

static int is_loopback(const struct sockaddr_storage *sa)
{
	const struct sockaddr_in *in = (const void *)sa;
	const struct sockaddr_in6 *in6 = (const void *)sa;

	if (sa->ss_family == AF_INET)
		return ((const uint8_t *)&in->sin_addr)[0] == 127;
	if (sa->ss_family != AF_INET6)
		return 0;
	if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr))
		return in6->sin6_addr.s6_addr[12] == 127;
	return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
}

/* Whether nothing about local is asked: see negotiate.c's design note. */
int ff_skip_loopback(const struct sockaddr_storage *local)
{
	pthread_once(&loopback_once, loopback_init);
	return !negotiate_loopback && is_loopback(local);
}

int ff_is_socket(int fd, int type, int must_be_unix)
{
	int t = 0, dom = 0;
	socklen_t tl = sizeof(t), dl = sizeof(dom);

	if (ff_real.getsockopt(fd, SOL_SOCKET, SO_TYPE, &t, &tl) || t != type)
		return 0;
	return !must_be_unix ||
	       (ff_real.getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &dl) == 0 && dom == AF_UNIX);
}
