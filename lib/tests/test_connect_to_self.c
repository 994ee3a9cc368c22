/* SPDX-License-Identifier: MIT */
/* Description: a single-threaded process connecting to its own listener does not hang: connect returns within the agent's wait plus slack, the connection stays TCP on both ends and works */
/* Channels: unix host-tcp shm shm-link */
#include "shimtest.h"

int main(int argc, char **argv)
{
	int64_t t0, dt;
	uint16_t port;
	int lfd, cfd, sfd;
	char c;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen(AF_INET, &port);
	t0 = t_ms();
	cfd = t_connect(AF_INET, port);	/* accept() cannot run until this returns */
	dt = t_ms() - t0;
	CHECK(dt < 50 + T_SLACK_MS, "connect took %lld ms", (long long)dt);
	t0 = t_ms();
	sfd = accept(lfd, NULL, NULL);
	CHECK(t_ms() - t0 < T_NO_WAIT_MS, "accept took %lld ms", (long long)(t_ms() - t0));
	CHECK(!t_swapped(cfd) && !t_swapped(sfd),
	      "one end swapped: %d/%d", t_real_domain(cfd), t_real_domain(sfd));
	CHECK(write(cfd, "s", 1) == 1 && read(sfd, &c, 1) == 1 && c == 's', "data");
	CHECK(write(sfd, "t", 1) == 1 && read(cfd, &c, 1) == 1 && c == 't', "data back");
	CHECK(t_agent_count("overlay peer-timeout") == 1, "no peer-timeout decision");
	close(cfd);
	close(sfd);
	close(lfd);
	return t_shim_finish();
}
