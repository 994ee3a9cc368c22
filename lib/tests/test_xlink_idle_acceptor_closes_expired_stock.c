/* SPDX-License-Identifier: MIT */
/* Description: an acceptor that never calls the library again after its last linked cross-host connection (an idle server) still closes its links when they expire: their listeners, the stock the connector left behind (which would sit in CLOSE_WAIT once the connector exits) and the overlay sockets waiting for the next accept(), all within LINK_TTL + 1 s of the grant */
/* Channels: host-tcp-link */
#include "shimtest.h"

#define CONNS	4
#define N	(4u << 10)
#define TTL	"300"	/* ms; the acceptor keeps a link 1 s longer */
#define WAIT_MS	(300 + 1000 + 3000)

static int client(int go, uint16_t port)
{
	return t_paced_client(go, port, CONNS, N);
}

/* The TCP sockets this process holds, besides its listener lfd. */
static int tcp_sockets(int lfd)
{
	int n = 0;

	for (int fd = 0; fd < 1024; fd++)
		n += fd != lfd && (t_real_domain(fd) == AF_INET || t_real_domain(fd) == AF_INET6) &&
		     t_real_sockopt(fd, SOL_SOCKET, SO_TYPE) == SOCK_STREAM;
	return n;
}

int main(int argc, char **argv)
{
	int go, lfd, left;
	int64_t end;
	pid_t pid;

	(void)argc;
	setenv("FF_TEST_LINK_TTL", TTL, 1);
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen_fork(client, &go, &pid);
	for (int i = 0; i < CONNS; i++)
		t_paced_accept(lfd, go, i, N);
	t_wait_child(pid, "client");
	CHECK(t_ledger_await(0, 2 * (CONNS - 1)) == 2 * (CONNS - 1), "%d linked ends, not %d: "
	      "the connections did not use the link", t_ledger_ends(0), 2 * (CONNS - 1));
	CHECK(tcp_sockets(lfd) > 0, "no link listener or stock held: the test proves nothing");
	/* No call into the library from here on: the reaper alone closes them. */
	end = t_ms() + WAIT_MS;
	while ((left = tcp_sockets(lfd)) > 0 && t_ms() < end)
		usleep(20 * 1000);
	CHECK(left == 0, "%d TCP sockets (link listener, stock, overlay) still held %d ms after the "
	      "last connection, past every link's expiry", left, WAIT_MS);
	close(lfd);
	return t_shim_finish();
}
