/* SPDX-License-Identifier: MIT */
/* Description: the staying end of an shm connection closes after its peer parked but before its own parking thread got its socket: its close waits for that socket (found by the connection's endpoints, the fd being gone) and moves what it wrote and the peer had not read into it, so the parked peer reads every byte, then EOF */
/* Channels: shm */
#include "shimtest.h"

#define N	(64u << 10)

int main(int argc, char **argv)
{
	int cfd, sfd;
	char c;

	(void)argc;
	setenv("FF_TEST_PARK_MS", "300", 1);
	setenv("FF_TEST_PARK_PEER_MS", "500", 1);
	t_setup_swapped_pair(argv, &cfd, &sfd);
	CHECK(t_send_stream(sfd, N, 7) == 0, "the acceptor's last bytes");
	for (int i = 0; i < 500 && t_real_domain(cfd) != AF_INET; i++)
		usleep(10000);
	CHECK(t_real_domain(cfd) == AF_INET && t_agent_count("park") == 1,
	      "the connector is not parked alone (family %d, %d ends handed)", t_real_domain(cfd),
	      t_agent_count("park"));
	close(sfd);	/* before the agent hands the acceptor its end */
	CHECK(t_recv_stream(cfd, N, 7) == 0, "the acceptor's last bytes, at the parked connector");
	CHECK(read(cfd, &c, 1) == 0, "no EOF after them");
	CHECK(t_agent_count("watch parked") == 2, "the agent heard %d ends parked, want 2",
	      t_agent_count("watch parked"));
	close(cfd);
	return t_exit_code();
}
