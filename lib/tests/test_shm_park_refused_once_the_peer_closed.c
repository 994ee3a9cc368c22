/* SPDX-License-Identifier: MIT */
/* Description: the moving end of an shm connection whose peer wrote its last bytes and closed (they are in the ring only: the peer's parking could not move them) is not parked: its parking thread answers not parked, nothing changes, and the program still reads every byte, then EOF, from shared memory */
/* Channels: shm */
#include "shimtest.h"

#define N	(64u << 10)

int main(int argc, char **argv)
{
	int cfd, sfd;
	char c;

	(void)argc;
	setenv("FF_TEST_PARK_MS", "300", 1);
	t_setup_swapped_pair(argv, &cfd, &sfd);
	CHECK(t_send_stream(sfd, N, 4) == 0, "the acceptor's last bytes");
	close(sfd);
	for (int i = 0; i < 500 && t_agent_count("watch not-parked") < 1; i++)
		usleep(10000);
	CHECK(t_agent_count("watch not-parked") == 1 && t_agent_count("watch parked") == 0,
	      "the connector answered %d not parked, %d parked; want 1 and 0",
	      t_agent_count("watch not-parked"), t_agent_count("watch parked"));
	CHECK(t_real_domain(cfd) == AF_UNIX, "the connector's fd is of family %d: moved", t_real_domain(cfd));
	CHECK(t_recv_stream(cfd, N, 4) == 0, "the acceptor's last bytes, read after the refusal");
	CHECK(read(cfd, &c, 1) == 0, "no EOF after them");
	close(cfd);
	return t_exit_code();
}
