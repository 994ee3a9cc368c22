/* SPDX-License-Identifier: MIT */
/* Description: a swapped fd closed behind the shim (a system call the shim cannot see, as a libc-internal close makes) whose number a UDP socket or an AF_UNIX accept then reuses: the new socket is plain (sendto with an address works, getpeername is its own), not taken for the old connection */
/* Channels: unix host-tcp shm shm-link */
#include <sys/syscall.h>

#include "shimtest.h"

/*
 * Take every free number below fd, then close fd without the shim seeing
 * it (libc's syscall() itself, as an inline system call would): the next
 * new file gets exactly fd.
 * Returns how many numbers fill[] took; release them with unfill().
 */
static int close_behind(int fd, int fill[64])
{
	int n = 0, f;

	while (n < 64 && (f = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0) {
		if (f > fd) {
			close(f);
			break;
		}
		fill[n++] = f;
	}
	CHECK(t_raw(SYS_close_range, fd, fd, 0) == 0, "close_range: %s", strerror(errno));
	return n;
}

static void unfill(int *fill, int n)
{
	while (n--)
		close(fill[n]);
}

static void udp_reuses(void)
{
	struct sockaddr_storage ss, peer;
	socklen_t len = t_addr(AF_INET, &ss, 0), pl = sizeof(peer);
	int cfd, sfd, u, r, fill[64], n;
	char c;

	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(cfd), "not swapped");
	n = close_behind(cfd, fill);
	u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	unfill(fill, n);
	if (u != cfd) {
		CHECK(0, "the UDP socket got fd %d, not the closed %d", u, cfd);
		return;
	}
	r = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	CHECK(bind(r, (void *)&ss, len) == 0 && getsockname(r, (void *)&ss, &len) == 0, "bind");
	if (sendto(u, "u", 1, 0, (void *)&ss, len) != 1)
		CHECK(0, "UDP sendto on the reused number: %s", strerror(errno));
	else
		CHECK(recv(r, &c, 1, 0) == 1 && c == 'u', "UDP datagram lost");
	CHECK(getpeername(u, (void *)&peer, &pl) < 0 && errno == ENOTCONN,
	      "getpeername of the UDP socket answered the old connection's name");
	close(u);
	close(r);
	close(sfd);
}

static void unix_accept_reuses(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct sockaddr_storage peer;
	socklen_t pl = sizeof(peer);
	int cfd, sfd, l, b, a, fill[64], n;

	t_path(sa.sun_path, sizeof(sa.sun_path), "stale.sock");
	l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	b = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(bind(l, (void *)&sa, sizeof(sa)) == 0 && listen(l, 1) == 0 &&
	      connect(b, (void *)&sa, sizeof(sa)) == 0, "unix pair");
	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(sfd), "not swapped");
	n = close_behind(sfd, fill);
	a = accept(l, NULL, NULL);
	unfill(fill, n);
	CHECK(a == sfd, "accept got fd %d, not the closed %d", a, sfd);
	CHECK(getpeername(a, (void *)&peer, &pl) == 0 && peer.ss_family == AF_UNIX,
	      "the accepted unix socket answered the old connection's name (family %d)",
	      peer.ss_family);
	close(a);
	close(b);
	close(l);
	close(cfd);
	unlink(sa.sun_path);
}

int main(int argc, char **argv)
{
	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	udp_reuses();
	unix_accept_reuses();
	return t_shim_finish();
}
