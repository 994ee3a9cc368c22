/* SPDX-License-Identifier: MIT */
/* Description: a blocking accept() waiting on a cross-host link, interrupted by a signal whose handler has SA_RESTART, goes on even though the process also has handlers without SA_RESTART that cannot have interrupted it: a fault handler (SIGSEGV, as sanitizers and crash reporters install) and the handler of a signal this thread blocks; the connection that comes next is set up over the link, data intact */
/* Channels: host-tcp-link */
#include "shimtest.h"

#define N	(64u << 10)

enum conn { GIVES_LINK, AFTER_RESTART, CONNS };

static int client(int go, uint16_t port)
{
	return t_paced_client(go, port, CONNS, N);
}

int main(int argc, char **argv)
{
	sigset_t usr2;
	int go, lfd, fd;
	pid_t pid;

	(void)argc;
	setenv("FF_TEST_LINK_TTL", "60000", 1);
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen_fork(client, &go, &pid);
	t_paced_accept(lfd, go, GIVES_LINK, N);

	t_sigaction(SIGSEGV, t_never, 0);
	t_sigaction(SIGUSR2, t_never, 0);
	sigemptyset(&usr2);
	sigaddset(&usr2, SIGUSR2);
	CHECK(!pthread_sigmask(SIG_BLOCK, &usr2, NULL), "block SIGUSR2");
	t_alarm_soon(SA_RESTART, go);
	fd = accept(lfd, NULL, NULL);
	CHECK(fd >= 0, "accept with SA_RESTART: %s (handlers that cannot interrupt it counted)",
	      strerror(errno));
	CHECK(t_caught == 1, "%d signals, not 1", (int)t_caught);
	CHECK(t_swapped(fd), "connection %d not swapped", AFTER_RESTART);
	t_exchange_nth(fd, AFTER_RESTART, N, 0);
	close(fd);
	t_wait_child(pid, "client");
	close(lfd);
	CHECK(t_agent_count("ask") == 2, "%d asks, not 2: connection %d was not linked",
	      t_agent_count("ask"), AFTER_RESTART);
	return t_shim_finish();
}
