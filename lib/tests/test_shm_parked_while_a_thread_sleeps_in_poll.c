/* SPDX-License-Identifier: MIT */
/* Description: two shm connections are parked on TCP while a thread of the connector sleeps on each, one in poll() and one in select(): woken by the bell's shutdown, each looks at its fd again only once the TCP socket is there, so it sleeps on, now on that socket, reports nothing before the acceptor writes, and wakes as soon as it does (before, the park put the socket at the fd before the sleeper looked, and it slept on, on the bell only, through the bytes until its timeout: a python client's poll() before each recv stalled its whole migration) */
/* Channels: shm */
#include "shimtest.h"

#define N	(64u << 10)

static int server(int ctl)
{
	int lfd, fd[2];

	t_serve_two(ctl, &lfd, fd);
	t_stream_on_go(ctl, fd, 2, N);
	close(lfd);
	return t_exit_code();
}

int main(int argc, char **argv)
{
	struct t_sleeper s[2];
	pthread_t t[2];
	uint16_t port;
	int ctl;
	pid_t pid;

	(void)argc;
	setenv("FF_TEST_PARK_MS", "300", 1);
	t_shim_setup(argv, FA_BROKER);
	port = t_fork_server(server, &ctl, &pid);
	for (int i = 0; i < 2; i++) {
		s[i] = (struct t_sleeper){ t_connect(AF_INET, port), i, 0 };
		CHECK(t_swapped(s[i].fd), "connection %d is on shm", i);
		CHECK(!pthread_create(&t[i], NULL, t_sleep_in_wait, &s[i]), "thread");
	}
	t_await_parked(s, 2);
	t_wake_sleepers(ctl, s, t, 2, N);
	t_wait_child(pid, "the acceptor");
	return t_exit_code();
}
