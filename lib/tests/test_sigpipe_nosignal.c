/* SPDX-License-Identifier: MIT */
/* Description: writing to a swapped connection whose peer closed raises SIGPIPE and EPIPE as TCP does; MSG_NOSIGNAL gives EPIPE without the signal */
#include "shimtest.h"

static volatile sig_atomic_t pipes;

static void on_pipe(int sig)
{
	(void)sig;
	pipes++;
}

int main(int argc, char **argv)
{
	int cfd, sfd, r;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	signal(SIGPIPE, on_pipe);
	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_real_domain(cfd) == AF_UNIX, "not swapped");
	close(sfd);
	r = (int)send(cfd, "x", 1, MSG_NOSIGNAL);
	CHECK(r == -1 && errno == EPIPE, "send MSG_NOSIGNAL: %d (%s)", r, strerror(errno));
	CHECK(pipes == 0, "SIGPIPE despite MSG_NOSIGNAL");
	r = (int)write(cfd, "x", 1);
	CHECK(r == -1 && errno == EPIPE, "write: %d (%s)", r, strerror(errno));
	CHECK(pipes == 1, "%d SIGPIPE for write", (int)pipes);
	close(cfd);
	return t_shim_finish();
}
