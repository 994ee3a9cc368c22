/* SPDX-License-Identifier: MIT */
/* Description: broken PATH replies (wrong seq, fast path without an fd, an fd that is not a stream socket, two fds, PATH_KIND out of range or shm, overlay with an fd) leave both ends on the overlay with data intact, close every received fd (no leak), crash nothing, and send CLOSED for what the agent answered */
#include "shimtest.h"

/* Listen once: the agent session of this thread is open again afterwards. */
static void touch_session(void)
{
	uint16_t port;

	close(t_listen(AF_INET, &port));
}

int main(int argc, char **argv)
{
	char name[64];
	int n0;

	(void)argc;
	t_shim_setup(argv, FA_HOSTILE);
	touch_session();
	n0 = t_count_fds();
	for (int k = 0; k < FA_HOSTILE_CASES; k++) {
		const char *h = fa_hostile_name[k];
		int cfd, sfd, n;
		char c;

		t_pair(AF_INET, &cfd, &sfd);
		CHECK(!t_swapped(cfd) && !t_swapped(sfd), "%s: swapped", h);
		CHECK(t_real_domain(cfd) == AF_INET && t_real_domain(sfd) == AF_INET,
		      "%s: not the overlay TCP socket", h);
		CHECK(write(cfd, "q", 1) == 1 && read(sfd, &c, 1) == 1 && c == 'q', "%s: data", h);
		CHECK(write(sfd, "r", 1) == 1 && read(cfd, &c, 1) == 1 && c == 'r', "%s: data back", h);
		close(cfd);
		close(sfd);
		touch_session();
		n = t_count_fds();
		CHECK(n == n0, "%s: %d fds open, %d before (a received fd leaked)", h, n, n0);
		snprintf(name, sizeof(name), "hostile %s", h);
		CHECK(t_agent_count(name) == 2, "%s: asked %d times, not by both ends", h,
		      t_agent_count(name));
	}
	/*
	 * Every answered PATH is listed by the agent until CLOSED, so both ends
	 * close it; a reply for another seq answered nothing (the session is dropped).
	 */
	CHECK(t_agent_await("closed", 2 * (FA_HOSTILE_CASES - 1)) == 2 * (FA_HOSTILE_CASES - 1),
	      "%d CLOSED, want %d",
	      t_agent_count("closed"), 2 * (FA_HOSTILE_CASES - 1));
	return t_shim_finish();
}
