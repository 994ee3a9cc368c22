/* SPDX-License-Identifier: MIT */
/* Description: with no agent socket, connections stay on TCP with no error and no added delay, data flows, and FREEFLOW_DEBUG=1 prints one line per fallback saying why (silent otherwise) */
#include "shimtest.h"

int main(int argc, char **argv)
{
	int64_t t0;
	int cfd, sfd, n;
	char c;

	/* "<self> pair": one connection pair; stderr is what the parent inspects. */
	if (argc == 2 && !strcmp(argv[1], "pair"))
		return t_pair_role();
	t_shim_setup(argv, -1);
	t0 = t_ms();
	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_ms() - t0 < T_NO_WAIT_MS, "connect+accept took %lld ms without an agent",
	      (long long)(t_ms() - t0));
	CHECK(t_real_domain(cfd) == AF_INET && t_real_domain(sfd) == AF_INET, "swapped without an agent");
	CHECK(write(cfd, "x", 1) == 1 && read(sfd, &c, 1) == 1 && c == 'x', "data");
	close(cfd);
	close(sfd);
	n = t_stderr_lines("pair", "1", "stays on the overlay");
	/* The listener and the connecting end each say why; the accepted end was never asked. */
	CHECK(n == 2, "FREEFLOW_DEBUG=1 printed %d lines (-1: a line without the reason)", n);
	n = t_stderr_lines("pair", "0", "");
	CHECK(n == 0, "FREEFLOW_DEBUG=0 printed %d lines", n);
	return t_shim_finish();
}
