/* SPDX-License-Identifier: MIT */
/* Description: after the swap getsockname/getpeername return the overlay TCP addresses (IPv4 and IPv6), consistent between both ends, and truncate like the kernel */
/* Channels: unix host-tcp shm shm-link */
#include "shimtest.h"

static uint16_t port_of(const struct sockaddr_storage *ss)
{
	return ntohs(ss->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)ss)->sin6_port
					       : ((const struct sockaddr_in *)ss)->sin_port);
}

static void check_family(int family)
{
	struct sockaddr_storage cl, cp, sl, sp;
	socklen_t cll = sizeof(cl), cpl = sizeof(cp), sll = sizeof(sl), spl = sizeof(sp);
	socklen_t want = family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	int cfd, sfd;

	t_pair(family, &cfd, &sfd);
	CHECK(t_swapped(cfd) && t_swapped(sfd), "not swapped");
	CHECK(getsockname(cfd, (void *)&cl, &cll) == 0 && getpeername(cfd, (void *)&cp, &cpl) == 0 &&
	      getsockname(sfd, (void *)&sl, &sll) == 0 && getpeername(sfd, (void *)&sp, &spl) == 0,
	      "a name call failed: %s", strerror(errno));
	CHECK(cll == want && cpl == want && sll == want && spl == want, "lengths %u %u %u %u",
	      cll, cpl, sll, spl);
	CHECK(cl.ss_family == family && cp.ss_family == family && sl.ss_family == family &&
	      sp.ss_family == family, "family %d: got %d %d %d %d", family, cl.ss_family,
	      cp.ss_family, sl.ss_family, sp.ss_family);
	CHECK(!memcmp(&cl, &sp, want) && !memcmp(&cp, &sl, want),
	      "client's local is not server's peer (ports %u/%u, %u/%u)", port_of(&cl),
	      port_of(&sp), port_of(&cp), port_of(&sl));
	CHECK(port_of(&cl) != 0 && port_of(&cp) != 0, "zero port");
	{
		/* A short buffer gets the first bytes and the full length, as from the kernel. */
		uint8_t small[4];
		socklen_t sl2 = sizeof(small);

		CHECK(getpeername(cfd, (void *)small, &sl2) == 0 && sl2 == want &&
		      !memcmp(small, &cp, sizeof(small)), "truncation");
	}
	close(cfd);
	close(sfd);
}

int main(int argc, char **argv)
{
	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	check_family(AF_INET);
	check_family(AF_INET6);
	CHECK(t_fast_await(2) == 2, "%d fast connections", t_fast_conns());
	return t_shim_finish();
}
