/* SPDX-License-Identifier: MIT */
/* Description: an IPv6 connection on ::1 is swapped like IPv4: 1 MiB each way intact, SO_DOMAIN says AF_INET6, IPv6-level options work */
/* Channels: unix host-tcp shm shm-link */
#include "shimtest.h"

int main(int argc, char **argv)
{
	int cfd, sfd, v = -1, hops = -1;
	socklen_t l = sizeof(v), hl = sizeof(hops);

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	t_pair(AF_INET6, &cfd, &sfd);
	CHECK(t_swapped(cfd) && t_swapped(sfd), "not swapped");
	CHECK(getsockopt(cfd, SOL_SOCKET, SO_DOMAIN, &v, &l) == 0 && v == AF_INET6, "SO_DOMAIN %d", v);
	CHECK(getsockopt(cfd, IPPROTO_IPV6, IPV6_UNICAST_HOPS, &hops, &hl) == 0 && hops == 64,
	      "IPV6_UNICAST_HOPS %d", hops);
	CHECK(t_send_stream(cfd, 1 << 16, 3) == 0 && t_recv_stream(sfd, 1 << 16, 3) == 0, "c->s");
	CHECK(t_send_stream(sfd, 1 << 16, 4) == 0 && t_recv_stream(cfd, 1 << 16, 4) == 0, "s->c");
	close(cfd);
	close(sfd);
	CHECK(t_fast_await(1) == 1, "%d fast connections", t_fast_conns());
	return t_shim_finish();
}
