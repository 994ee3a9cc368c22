/* SPDX-License-Identifier: MIT */
/* Description: an agent that refuses the session with LIMIT (the container holds all the sessions it may) costs no wait: connections stay on TCP with no error, data flows, each connection asks once more, and FREEFLOW_DEBUG=1 says why ("agent session limit") */
#include "shimtest.h"

int main(int argc, char **argv)
{
	int64_t t0;
	int cfd, sfd, n, asked;
	char c;

	/* "<self> pair": one connection pair; stderr is what the parent inspects. */
	if (argc == 2 && !strcmp(argv[1], "pair"))
		return t_pair_role();
	t_shim_setup(argv, FA_LIMIT);
	for (int i = 0; i < 2; i++) {
		asked = t_agent_count("limit");
		t0 = t_ms();
		t_pair(AF_INET, &cfd, &sfd);
		CHECK(t_ms() - t0 < T_NO_WAIT_MS, "connect+accept took %lld ms with the session refused",
		      (long long)(t_ms() - t0));
		CHECK(t_real_domain(cfd) == AF_INET && t_real_domain(sfd) == AF_INET, "swapped without a session");
		CHECK(write(cfd, "x", 1) == 1 && read(sfd, &c, 1) == 1 && c == 'x', "data");
		close(cfd);
		close(sfd);
		/* No back-off as for a silent agent: the next connection asks again (a place may be free). */
		CHECK(t_agent_count("limit") > asked, "connection %d did not ask for a session", i);
	}
	n = t_stderr_lines("pair", "1", "agent session limit");
	/* The listener (not announced) and the connecting end each say why. */
	CHECK(n == 2, "FREEFLOW_DEBUG=1 printed %d lines (-1: a line without the reason)", n);
	return t_shim_finish();
}
