/* SPDX-License-Identifier: MIT */
/* Description: dup, dup2, dup3 and fcntl(F_DUPFD, F_DUPFD_CLOEXEC) of a swapped fd share the connection (overlay names included); it lives until the last copy closes, and only then is CLOSED sent */
/* Channels: unix host-tcp shm shm-link */
#include "shimtest.h"

static void check_copy(int fd, int sfd, const char *how)
{
	struct sockaddr_in pa;
	socklen_t pl = sizeof(pa);
	char c;

	CHECK(fd >= 0, "%s: %s", how, strerror(errno));
	CHECK(getpeername(fd, (void *)&pa, &pl) == 0 && pa.sin_family == AF_INET, "%s: getpeername", how);
	CHECK(write(fd, "d", 1) == 1 && read(sfd, &c, 1) == 1 && c == 'd', "%s: data", how);
}

int main(int argc, char **argv)
{
	int cfd, sfd, d1, d2, d3, d4, d5;
	char c;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(cfd), "not swapped");
	d1 = dup(cfd);
	check_copy(d1, sfd, "dup");
	d2 = dup2(cfd, 100);
	check_copy(d2, sfd, "dup2");
	d3 = dup3(cfd, 101, O_CLOEXEC);
	check_copy(d3, sfd, "dup3");
	CHECK(fcntl(d3, F_GETFD) == FD_CLOEXEC, "dup3 O_CLOEXEC");
	d4 = fcntl(cfd, F_DUPFD, 200);
	check_copy(d4, sfd, "F_DUPFD");
	d5 = fcntl(cfd, F_DUPFD_CLOEXEC, 300);
	check_copy(d5, sfd, "F_DUPFD_CLOEXEC");
	close(cfd);
	close(d1);
	close(d2);
	close(d3);
	close(d4);
	CHECK(t_agent_count("closed") == 0, "CLOSED sent while a copy is open");
	check_copy(d5, sfd, "last copy");
	close(d5);
	CHECK(read(sfd, &c, 1) == 0, "no EOF after the last copy closed");
	CHECK(t_agent_await("closed", 1) == 1, "%d CLOSED after the last copy", t_agent_count("closed"));
	/* dup2 over a swapped fd drops the old connection from that number. */
	t_pair(AF_INET, &cfd, &d1);
	d2 = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK(dup2(d2, cfd) == cfd, "dup2 over");
	{
		struct sockaddr_in pa;
		socklen_t pl = sizeof(pa);

		CHECK(getpeername(cfd, (void *)&pa, &pl) == -1 && errno == ENOTCONN,
		      "dup2'd UDP socket still answers with the old peer");
	}
	close(cfd);
	close(d2);
	close(d1);
	close(sfd);
	return t_shim_finish();
}
