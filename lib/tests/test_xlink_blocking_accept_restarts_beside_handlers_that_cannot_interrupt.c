/* SPDX-License-Identifier: MIT */
/* Description: a blocking accept() waiting on a cross-host link, interrupted by a signal whose handler has SA_RESTART, goes on even though the process also has handlers without SA_RESTART that cannot have interrupted it: a fault handler (SIGSEGV, as sanitizers and crash reporters install) and the handler of a signal this thread blocks; the connection that comes next is set up over the link, data intact */
/* Channels: host-tcp-link */
#include <signal.h>
#include <sys/time.h>

#include "shimtest.h"

#define N	(64u << 10)

enum conn { GIVES_LINK, AFTER_RESTART, CONNS };

static volatile sig_atomic_t rang;
static int go_on_ring = -1;	/* the handler tells the client to connect (write is signal-safe) */

static void ring(int sig)
{
	(void)sig;
	rang++;
	if (write(go_on_ring, "g", 1) != 1)
		_exit(T_EXIT_FAIL);
}

static void never(int sig)
{
	(void)sig;
	_exit(T_EXIT_FAIL);
}

static void handle(int sig, void (*fn)(int), int flags)
{
	struct sigaction sa = { .sa_handler = fn, .sa_flags = flags };

	sigemptyset(&sa.sa_mask);
	CHECK(!sigaction(sig, &sa, NULL), "sigaction %d: %s", sig, strerror(errno));
}

static int client(int go, uint16_t port)
{
	return t_paced_client(go, port, CONNS, N);
}

int main(int argc, char **argv)
{
	struct itimerval soon = { .it_value = { .tv_usec = 50000 } };
	sigset_t usr2;
	int go, lfd, fd;
	pid_t pid;

	(void)argc;
	setenv("FF_TEST_LINK_TTL", "60000", 1);
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen_fork(client, &go, &pid);
	t_paced_accept(lfd, go, GIVES_LINK, N);

	handle(SIGSEGV, never, 0);
	handle(SIGUSR2, never, 0);
	sigemptyset(&usr2);
	sigaddset(&usr2, SIGUSR2);
	CHECK(!pthread_sigmask(SIG_BLOCK, &usr2, NULL), "block SIGUSR2");
	go_on_ring = go;
	handle(SIGALRM, ring, SA_RESTART);
	CHECK(!setitimer(ITIMER_REAL, &soon, NULL), "setitimer: %s", strerror(errno));
	fd = accept(lfd, NULL, NULL);
	CHECK(fd >= 0, "accept with SA_RESTART: %s (handlers that cannot interrupt it counted)",
	      strerror(errno));
	CHECK(rang == 1, "%d signals, not 1", (int)rang);
	CHECK(t_swapped(fd), "connection %d not swapped", AFTER_RESTART);
	t_exchange_nth(fd, AFTER_RESTART, N, 0);
	close(fd);
	t_wait_child(pid, "client");
	close(lfd);
	CHECK(t_agent_count("ask") == 2, "%d asks, not 2: connection %d was not linked",
	      t_agent_count("ask"), AFTER_RESTART);
	return t_shim_finish();
}
