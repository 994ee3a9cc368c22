/* SPDX-License-Identifier: MIT */
/* Description: shutdown(SHUT_WR) on a swapped connection: the peer reads all data then EOF, and can still send its answer back */
/* Channels: unix host-tcp shm shm-link */
#include "shimtest.h"

int main(int argc, char **argv)
{
	char buf[64];
	int cfd, sfd;
	ssize_t n;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(cfd), "not swapped");
	CHECK(write(cfd, "request", 7) == 7, "write");
	CHECK(shutdown(cfd, SHUT_WR) == 0, "shutdown: %s", strerror(errno));
	CHECK(recv(sfd, buf, sizeof(buf), MSG_WAITALL) == 7, "server did not get data then EOF");
	CHECK(read(sfd, buf, sizeof(buf)) == 0, "no EOF after SHUT_WR");
	CHECK(write(sfd, "answer", 6) == 6, "server write after peer's SHUT_WR");
	n = read(cfd, buf, sizeof(buf));
	CHECK(n == 6 && !memcmp(buf, "answer", 6), "client read after its SHUT_WR: %zd", n);
	CHECK(send(cfd, "x", 1, MSG_NOSIGNAL) == -1 && errno == EPIPE, "send after SHUT_WR did not fail with EPIPE");
	close(sfd);
	CHECK(read(cfd, buf, sizeof(buf)) == 0, "no EOF after peer close");
	close(cfd);
	return t_shim_finish();
}
