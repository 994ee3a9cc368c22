/* SPDX-License-Identifier: MIT */
/* Description: listeners on 0.0.0.0 and on [::] (dual stack, reached over IPv4 as ::ffff:127.0.0.1) register and get swapped connections; the v4-mapped names reach the agent as IPv4 endpoints */
/* Channels: unix host-tcp shm shm-link */
#include "shimtest.h"

static void check_any(int family)
{
	struct sockaddr_storage ss = { .ss_family = (sa_family_t)family };
	socklen_t len = family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	struct t_conn_arg a = { .family = AF_INET };
	int lfd = socket(family, SOCK_STREAM, 0), sfd, off = 0;
	struct sockaddr_storage peer;
	socklen_t pl = sizeof(peer);
	pthread_t th;

	if (family == AF_INET6)
		setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
	CHECK(bind(lfd, (void *)&ss, len) == 0 && listen(lfd, 4) == 0, "listen on any");
	len = sizeof(ss);
	getsockname(lfd, (void *)&ss, &len);
	a.port = ntohs(family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
					  : ((struct sockaddr_in *)&ss)->sin_port);
	pthread_create(&th, NULL, t_connect_thread, &a);
	sfd = accept(lfd, (void *)&peer, &pl);
	pthread_join(th, NULL);
	CHECK(t_swapped(sfd) && t_swapped(a.fd),
	      "family %d: not swapped", family);
	CHECK(peer.ss_family == family, "accept's address family %d", peer.ss_family);
	close(sfd);
	close(a.fd);
	close(lfd);
}

int main(int argc, char **argv)
{
	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	check_any(AF_INET);
	check_any(AF_INET6);
	CHECK(t_fast_await(2) == 2, "%d fast connections", t_fast_conns());
	return t_shim_finish();
}
