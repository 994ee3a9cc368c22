/* SPDX-License-Identifier: MIT */
/* Description: writing to a swapped connection whose peer closed raises SIGPIPE and EPIPE as TCP does; MSG_NOSIGNAL gives EPIPE without the signal */
/* Channels: unix host-tcp shm shm-link */
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
	CHECK(t_swapped(cfd), "not swapped");
	close(sfd);
	/*
	 * A TCP socket (the overlay, or a host-tcp channel) accepts the first
	 * write after the peer closed and gets an RST for it; an AF_UNIX one
	 * fails at once. Either way EPIPE comes within a few writes.
	 */
	for (int i = 0; i < 50; i++) {
		r = (int)send(cfd, "x", 1, MSG_NOSIGNAL);
		if (r < 0)
			break;
		usleep(2000);
	}
	CHECK(r == -1 && errno == EPIPE, "send MSG_NOSIGNAL: %d (%s)", r, strerror(errno));
	CHECK(pipes == 0, "SIGPIPE despite MSG_NOSIGNAL");
	r = (int)write(cfd, "x", 1);
	CHECK(r == -1 && errno == EPIPE, "write: %d (%s)", r, strerror(errno));
	CHECK(pipes == 1, "%d SIGPIPE for write", (int)pipes);
	close(cfd);
	return t_shim_finish();
}
