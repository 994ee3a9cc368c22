/* SPDX-License-Identifier: MIT */
/* Description: the last close of a connection the agent answered with overlay sends CLOSED too (the agent lists it until then), quickly; an end that never asked sends nothing */
#include <sys/syscall.h>

#include "shimtest.h"

int main(int argc, char **argv)
{
	int cfd, sfd, fd2;
	int64_t t0;
	char c;

	(void)argc;
	t_shim_setup(argv, FA_OVERLAY);
	t_pair(AF_INET, &cfd, &sfd);
	CHECK(!t_swapped(cfd) && !t_swapped(sfd), "swapped although the agent said overlay");
	CHECK(t_agent_count("ask") == 2, "%d asks", t_agent_count("ask"));
	CHECK(write(cfd, "a", 1) == 1 && read(sfd, &c, 1) == 1 && c == 'a', "data");
	fd2 = dup(cfd);
	close(cfd);
	CHECK(t_agent_count("closed") == 0, "CLOSED while a copy of the fd is open");
	t0 = t_ms();
	close(fd2);
	close(sfd);
	CHECK(t_ms() - t0 < T_NO_WAIT_MS, "two closes took %lld ms", (long long)(t_ms() - t0));
	CHECK(t_agent_await("closed", 2) == 2, "%d CLOSED for two answered ends, want 2",
	      t_agent_count("closed"));

	t_unannounced_pair(&cfd, &sfd);
	CHECK(t_agent_count("ask") == 3, "%d asks, want 3 (only the connecting end)",
	      t_agent_count("ask"));
	close(cfd);
	close(sfd);
	CHECK(t_agent_await("closed", 3) == 3, "%d CLOSED, want 3 (the accepting end never asked)",
	      t_agent_count("closed"));
	return t_shim_finish();
}
