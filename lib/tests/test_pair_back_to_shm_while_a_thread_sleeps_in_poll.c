/* SPDX-License-Identifier: MIT */
/* Description: connections moved down to socket pairs (the acceptor forked) go back onto shared memory while a thread of the connector sleeps on each, for as long as it takes (10 s at most): in poll() since before the fork, on shm (it adopted the move down inside its wait and went on in the kernel), and in select() on the pair after it; the waits never hold a move back, and each sleeper, asleep in the kernel on what became the channel's bell, wakes when the acceptor writes after the move (its bells ring for it), and reads the bytes intact */
/* Channels: shm */
#include "shimtest.h"

#include <sys/wait.h>

#define N	(64u << 10)

static int server(int ctl)
{
	int lfd, fd[2];
	char go;

	t_serve_two(ctl, &lfd, fd);
	/* The connector's poll() is asleep on shm now. */
	CHECK(read(ctl, &go, 1) == 1, "the connector's fork");
	t_fork_child_exits();
	/* A byte on the second: the connector, reading it, takes that pair too. */
	CHECK(write(fd[1], "x", 1) == 1, "the byte after the fork");
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
	char x;

	(void)argc;
	setenv("FF_TEST_RESUME_MS", "200", 1);
	t_shim_setup(argv, FA_BROKER);
	port = t_fork_server(server, &ctl, &pid);
	for (int i = 0; i < 2; i++) {
		s[i] = (struct t_sleeper){ t_connect(AF_INET, port), i, 0 };
		CHECK(t_swapped(s[i].fd), "connection %d is on shm", i);
	}
	CHECK(!pthread_create(&t[0], NULL, t_sleep_in_wait, &s[0]), "thread");
	usleep(200000);
	CHECK(write(ctl, "f", 1) == 1, "fork");
	CHECK(read(s[1].fd, &x, 1) == 1 && x == 'x', "the byte after the fork");
	CHECK(!pthread_create(&t[1], NULL, t_sleep_in_wait, &s[1]), "thread");
	CHECK(t_ledger_entries_await(FF_PATH_SHM, "", 4) == 4, "5 s after the fork child exited %d ends are listed shm, want 4",
	      t_ledger_entries(FF_PATH_SHM, ""));
	t_wake_sleepers(ctl, s, t, 2, N);
	t_wait_child(pid, "the acceptor");
	return t_exit_code();
}
