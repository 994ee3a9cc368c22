/* SPDX-License-Identifier: MIT */
/* Description: a connector that writes part of a message on a stock connection of its cross-host link (a peer not following the protocol) gets that stock connection closed: the accepting process, waiting in a blocking accept() that watches its links, neither spins on it nor stops accepting, and the next connection is still set up, swapped, data intact both ways */
/* Channels: host-tcp-link */
#include <sys/resource.h>

#include "shimtest.h"

#define N		(64u << 10)
#define WAIT_MS		300	/* the client's pause before its last connect */

enum conn { GIVES_LINK, FILLS_STOCK, AFTER_JUNK, CONNS };

/*
 * Write the first bytes of a LINK_OFFER (a header promising 40 bytes, then
 * nothing) on every stock connection this process holds: AF_INET stream
 * sockets it did not open, connected to a port other than the server's.
 */
static int write_part(uint16_t server_port)
{
	static const uint8_t part[FF_HDR_LEN] = { 0x46, 0x46, 1, FF_MSG_LINK_OFFER, 0, 0, 0, 0, 40 };
	int n = 0;

	for (int fd = 3; fd < 1024; fd++) {
		struct sockaddr_in pa;
		socklen_t pl = sizeof(pa);

		if (t_real_domain(fd) != AF_INET || t_raw(SYS_getpeername, fd, &pa, &pl) ||
		    pa.sin_port == htons(server_port))
			continue;
		n += t_raw(SYS_write, fd, part, sizeof(part)) == sizeof(part);
	}
	return n;
}

static int client(int go, uint16_t port)
{
	for (int i = 0; i < CONNS; i++) {
		char c;
		int fd;

		CHECK(read(go, &c, 1) == 1, "the server never said go for connection %d", i);
		if (i == AFTER_JUNK) {
			CHECK(write_part(port) > 0, "no stock connection to write on");
			usleep(WAIT_MS * 1000);
		}
		fd = t_connect(AF_INET, port);
		CHECK(t_swapped(fd), "connection %d not swapped", i);
		t_exchange_nth(fd, i, N, 1);
		close(fd);
	}
	return t_exit_code();
}

static double cpu_ms(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

int main(int argc, char **argv)
{
	int go, lfd, fd;
	pid_t pid;
	double t0;

	(void)argc;
	setenv("FF_TEST_LINK_TTL", "60000", 1);
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen_fork(client, &go, &pid);
	for (int i = 0; i < CONNS; i++) {
		CHECK(write(go, "g", 1) == 1, "go %d", i);
		t0 = cpu_ms();
		fd = accept(lfd, NULL, NULL);
		CHECK(fd >= 0, "accept %d: %s", i, strerror(errno));
		/* Spinning on the junk would burn most of the client's pause. */
		if (i == AFTER_JUNK)
			CHECK(cpu_ms() - t0 < WAIT_MS / 3, "accept burnt %.0f ms of CPU in %d ms",
			      cpu_ms() - t0, WAIT_MS);
		CHECK(t_swapped(fd), "server connection %d not swapped", i);
		t_exchange_nth(fd, i, N, 0);
		close(fd);
	}
	t_wait_child(pid, "client");
	close(lfd);
	return t_shim_finish();
}
