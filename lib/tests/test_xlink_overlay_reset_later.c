/* SPDX-License-Identifier: MIT */
/* Description: the accepting end of a connection set up over a cross-host link resets the overlay socket it dropped at its next blocking accept(), not between accept() and the first byte: each such overlay connection is gone from both ends by then (no TIME_WAIT, no socket left), the last one waits at most until that next accept(), and the data of every connection arrives intact both ways */
/* Channels: host-tcp-link */
#include "shimtest.h"

#define CONNS	8
#define N	(16u << 10)

static int client(int go, uint16_t port)
{
	return t_paced_client(go, port, CONNS, N);
}

/* The state of socket lport→rport once it is gone, or still there after 2 s (a reset takes microseconds). */
static int state_after_reset(uint16_t lport, uint16_t rport)
{
	int st = t_tcp_state(lport, rport);

	for (int ms = 0; st != -1 && ms < 2000; ms += 10) {
		usleep(10 * 1000);
		st = t_tcp_state(lport, rport);
	}
	return st;
}

static int reused_later(const uint16_t *cport, int i)
{
	for (int j = i + 1; j < CONNS; j++)
		if (cport[j] == cport[i])
			return 1;
	return 0;
}

int main(int argc, char **argv)
{
	uint16_t lport, cport[CONNS];
	int go, lfd, fd;
	pid_t pid;

	(void)argc;
	setenv("FF_TEST_LINK_TTL", "60000", 1);
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen_fork(client, &go, &pid);
	lport = t_port_of(lfd, 0);
	for (int i = 0; i < CONNS; i++) {
		CHECK(write(go, "g", 1) == 1, "go %d", i);
		fd = accept(lfd, NULL, NULL);
		CHECK(fd >= 0 && t_swapped(fd), "connection %d not accepted and swapped", i);
		cport[i] = t_port_of(fd, 1);	/* the overlay peer, as the library answers */
		t_exchange_nth(fd, i, N, 0);
		close(fd);
	}
	t_wait_child(pid, "client");
	usleep(100 * 1000);	/* a TIME_WAIT would be there within microseconds, for 60 s */
	/*
	 * Each but the last was reset by then (the first, set up by the agent,
	 * at once; allowed 2 s more on a busy machine). A port a later connection bound again is that one's now:
	 * bind() gave it only once nothing held it any more.
	 */
	for (int i = 0; i < CONNS - 1; i++) {
		int st;

		if (reused_later(cport, i))
			continue;
		st = state_after_reset(cport[i], lport);
		CHECK(st == -1, "connection %d: the connector's overlay socket (port %u) is still there "
		      "(state %d)", i, cport[i], st);
		st = state_after_reset(lport, cport[i]);
		CHECK(st == -1, "connection %d: the acceptor's overlay socket (peer port %u) is still "
		      "there (state %d)", i, cport[i], st);
	}
	CHECK(t_tcp_state(cport[CONNS - 1], lport) != T_TCP_TIME_WAIT,
	      "the last connection's overlay socket is in TIME_WAIT");
	CHECK(t_ledger_await(0, 2 * (CONNS - 1)) == 2 * (CONNS - 1), "%d linked ends, not %d",
	      t_ledger_ends(0), 2 * (CONNS - 1));
	close(lfd);
	return t_shim_finish();
}
