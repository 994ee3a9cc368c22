/* SPDX-License-Identifier: MIT */
/* Description: when the agent dies, established swapped connections keep working, new ones take TCP at once with no error, and nothing hangs */
/* Channels: unix host-tcp shm shm-link */
#include "shimtest.h"

int main(int argc, char **argv)
{
	int64_t t0;
	int cfd, sfd, c2, s2;
	char c;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(cfd), "not swapped");
	t_stop_agent();
	CHECK(write(cfd, "a", 1) == 1 && read(sfd, &c, 1) == 1 && c == 'a', "old connection");
	t0 = t_ms();
	t_pair(AF_INET, &c2, &s2);
	CHECK(t_ms() - t0 < T_NO_WAIT_MS, "new connection took %lld ms", (long long)(t_ms() - t0));
	CHECK(!t_swapped(c2), "new connection swapped without an agent");
	CHECK(write(c2, "b", 1) == 1 && read(s2, &c, 1) == 1 && c == 'b', "new connection");
	close(c2);
	close(s2);
	close(cfd);	/* CLOSED to a dead agent: must not hang or fail */
	close(sfd);
	return t_shim_finish();
}
