/* SPDX-License-Identifier: MIT */
/* Description: loopback (127.0.0.1, ::1, ::ffff:127.0.0.1) is never asked about: a listener on loopback is not announced, its connections stay TCP without any agent request (not even HELLO); a listener on 0.0.0.0 or [::] is announced, but a loopback connection to it is not negotiated */
#include "shimtest.h"

/* A loopback pair of family that works and was left on TCP. */
static void check_pair(int family)
{
	int cfd, sfd;
	char c;

	t_pair(family, &cfd, &sfd);
	CHECK(t_real_domain(cfd) == family && t_real_domain(sfd) == family,
	      "family %d: the pair is not the program's TCP connection", family);
	CHECK(write(cfd, "x", 1) == 1 && read(sfd, &c, 1) == 1 && c == 'x', "family %d: data", family);
	close(cfd);
	close(sfd);
}

/* A listener on 0.0.0.0 or on [::] (dual stack, so the accepted end is ::ffff:127.0.0.1), reached on 127.0.0.1. */
static void check_any_address(int family)
{
	struct sockaddr_storage ss = { .ss_family = (sa_family_t)family };
	socklen_t len = family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	struct t_conn_arg a = { .family = AF_INET };
	int lfd = socket(family, SOCK_STREAM, 0), sfd, off = 0;
	pthread_t th;

	if (family == AF_INET6)
		setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
	CHECK(bind(lfd, (void *)&ss, len) == 0 && listen(lfd, 4) == 0, "family %d: listen on any", family);
	len = sizeof(ss);
	getsockname(lfd, (void *)&ss, &len);
	a.port = ntohs(family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
					  : ((struct sockaddr_in *)&ss)->sin_port);
	pthread_create(&th, NULL, t_connect_thread, &a);
	sfd = accept(lfd, NULL, NULL);
	pthread_join(th, NULL);
	CHECK(sfd >= 0 && t_real_domain(sfd) == family && t_real_domain(a.fd) == AF_INET,
	      "family %d: not the program's TCP connection", family);
	close(sfd);
	close(a.fd);
	close(lfd);
}

int main(int argc, char **argv)
{
	int64_t t0;

	(void)argc;
	setenv("FREEFLOW_NEGOTIATE_LOOPBACK", "0", 1);	/* the library's default */
	t_shim_setup(argv, FA_BROKER);
	t0 = t_ms();
	check_pair(AF_INET);
	check_pair(AF_INET6);
	CHECK(t_ms() - t0 < T_NO_WAIT_MS, "loopback pairs took %lld ms", (long long)(t_ms() - t0));
	CHECK(t_agent_count("hello") == 0 && t_agent_count("listen") == 0 && t_agent_count("ask") == 0,
	      "the agent was asked: %d hello, %d listen, %d ask", t_agent_count("hello"),
	      t_agent_count("listen"), t_agent_count("ask"));
	check_any_address(AF_INET);
	check_any_address(AF_INET6);
	CHECK(t_agent_count("listen") == 2, "the listeners on any address: %d listen", t_agent_count("listen"));
	CHECK(t_agent_count("ask") == 0, "a loopback connection was negotiated: %d ask", t_agent_count("ask"));
	return t_shim_finish();
}
