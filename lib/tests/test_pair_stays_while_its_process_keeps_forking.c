/* SPDX-License-Identifier: MIT */
/* Description: a connection moved down to a socket pair stays one while its acceptor's process keeps forking (a child every 100 ms that holds the pair for a moment: a move back under way would be inherited half done, and each fork's child may still hold the pair): no try moves it while the forks go on, the bytes both ways are intact throughout, and once the forks stop it moves back onto shared memory */
/* Channels: shm */
#include "shimtest.h"

#include <sys/wait.h>

#define N	(64u << 10)

static void *receive(void *arg)
{
	return (void *)(intptr_t)(t_recv_stream((int)(intptr_t)arg, N, 5) == 0);
}

static int server(int ctl)
{
	int lfd, fd = t_serve_one(ctl, &lfd), st;
	int64_t end = t_ms() + 3000;
	void *ok = NULL;
	pthread_t t;
	char go;

	CHECK(!pthread_create(&t, NULL, receive, (void *)(intptr_t)fd), "thread");
	while (t_ms() < end) {
		pid_t kid = fork();

		if (kid == 0) {
			usleep(20000);
			_exit(0);
		}
		CHECK(kid > 0 && waitpid(kid, &st, 0) == kid, "fork");
		usleep(80000);
	}
	pthread_join(t, &ok);
	CHECK(ok, "the connector's bytes during the forks");
	CHECK(t_ledger_entries(FF_PATH_SHM, "") == 0, "%d ends moved back onto shm while the acceptor forked",
	      t_ledger_entries(FF_PATH_SHM, ""));
	CHECK(t_ledger_entries_await(FF_PATH_SHM, "", 2) == 2, "5 s after the forks stopped %d ends are listed shm, want 2",
	      t_ledger_entries(FF_PATH_SHM, ""));
	CHECK(t_send_stream(fd, N, 6) == 0, "the acceptor's bytes after the move back");
	CHECK(t_recv_stream(fd, N, 7) == 0, "the connector's bytes after the move back");
	CHECK(read(ctl, &go, 1) == 1, "the connector's done");
	close(fd);
	close(lfd);
	return t_exit_code();
}

int main(int argc, char **argv)
{
	struct pollfd p;
	int ctl, fd;
	pid_t pid;

	(void)argc;
	setenv("FF_TEST_RESUME_MS", "50", 1);
	t_shim_setup(argv, FA_BROKER);
	fd = t_connect_forked(server, &ctl, &pid);
	CHECK(t_send_stream(fd, N, 5) == 0, "the connector's bytes during the forks");
	/* Asleep in poll() through the forks (it adopts the first move down) and the move back. */
	p = (struct pollfd){ fd, POLLIN, 0 };
	CHECK(poll(&p, 1, 15000) == 1 && (p.revents & POLLIN), "the connector's poll did not report the bytes after the move back");
	CHECK(t_recv_stream(fd, N, 6) == 0, "the acceptor's bytes after the move back");
	CHECK(t_send_stream(fd, N, 7) == 0, "the connector's bytes after the move back");
	CHECK(write(ctl, "d", 1) == 1, "done");
	close(fd);
	t_wait_child(pid, "the acceptor");
	return t_exit_code();
}
