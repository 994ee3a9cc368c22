/* SPDX-License-Identifier: MIT */
/* Description: a server without the library (its listener never registered, as a static Go binary's) gets plain TCP at once: the client is not delayed, sees no error, and the server sees only the client's bytes */
#include "shimtest.h"

int main(int argc, char **argv)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int64_t t0, dt;
	int lfd, cfd, sfd;
	char buf[16];

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	/* Raw system calls: the shim never sees this listener. */
	lfd = (int)t_raw(SYS_socket, AF_INET, SOCK_STREAM, 0);
	CHECK(t_raw(SYS_bind, lfd, &sa, sizeof(sa)) == 0 && t_raw(SYS_listen, lfd, 4) == 0, "listen");
	t_raw(SYS_getsockname, lfd, &sa, &len);
	t0 = t_ms();
	cfd = t_connect(AF_INET, ntohs(sa.sin_port));
	dt = t_ms() - t0;
	CHECK(dt < T_NO_WAIT_MS, "connect took %lld ms", (long long)dt);
	CHECK(t_real_domain(cfd) == AF_INET, "swapped");
	sfd = (int)t_raw(SYS_accept4, lfd, NULL, NULL, 0);
	CHECK(write(cfd, "only-this", 9) == 9, "write");
	CHECK(t_raw(SYS_read, sfd, buf, sizeof(buf)) == 9 && !memcmp(buf, "only-this", 9),
	      "the server saw bytes it was not sent");
	CHECK(t_agent_count("overlay listener-not-freeflow") == 1, "agent decision missing");
	close(cfd);
	t_raw(SYS_close, sfd);
	t_raw(SYS_close, lfd);
	return t_shim_finish();
}
