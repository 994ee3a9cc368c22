/* SPDX-License-Identifier: MIT */
/* Description: when the agent answers PATH overlay, both ends keep their TCP connection untouched and working, with no error */
#include "shimtest.h"

int main(int argc, char **argv)
{
	int cfd, sfd;
	char c;

	(void)argc;
	t_shim_setup(argv, FA_OVERLAY);
	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_real_domain(cfd) == AF_INET && t_real_domain(sfd) == AF_INET, "swapped");
	CHECK(t_send_stream(cfd, 1 << 16, 9) == 0 && t_recv_stream(sfd, 1 << 16, 9) == 0, "data");
	CHECK(write(sfd, "y", 1) == 1 && read(cfd, &c, 1) == 1 && c == 'y', "data back");
	CHECK(t_agent_count("overlay") == 2, "%d overlay answers", t_agent_count("overlay"));
	close(cfd);
	close(sfd);
	return t_shim_finish();
}
