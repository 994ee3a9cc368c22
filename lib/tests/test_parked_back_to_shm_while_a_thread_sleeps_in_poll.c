/* SPDX-License-Identifier: MIT */
/* Description: two connections parked on TCP go back onto shared memory while a thread of the connector sleeps on each, one in poll() and one in select(), since after the park: asleep on the TCP socket that leaves the fd, each is woken (the socket is shut down for reading, nothing sent) and asks again on shm for the time left, reports nothing before the acceptor writes, then wakes when it does and reads its bytes intact */
/* Channels: shm */
#include "shimtest.h"

#define N	(64u << 10)

static int server(int ctl)
{
	int lfd, fd[2];

	t_serve_two(ctl, &lfd, fd);
	/* The connector says when both connections are on shm again. */
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
	setenv("FF_TEST_PARK_MS", "100", 1);
	setenv("FF_TEST_RESUME_MS", "600", 1);
	t_shim_setup(argv, FA_BROKER);
	port = t_fork_server(server, &ctl, &pid);
	for (int i = 0; i < 2; i++) {
		s[i] = (struct t_sleeper){ t_connect(AF_INET, port), i, 0 };
		CHECK(t_swapped(s[i].fd), "connection %d is on shm", i);
	}
	t_await_parked(s, 2);
	for (int i = 0; i < 2; i++)
		CHECK(!pthread_create(&t[i], NULL, t_sleep_in_wait, &s[i]), "thread");
	CHECK(t_ledger_entries_await(FF_PATH_SHM, "", 4) == 4, "%d ends are listed shm 5 s after the park, want 4",
	      t_ledger_entries(FF_PATH_SHM, ""));
	t_wake_sleepers(ctl, s, t, 2, N);
	t_wait_child(pid, "the acceptor");
	return t_exit_code();
}
