/* SPDX-License-Identifier: MIT */
/* Description: two connections parked on TCP go back onto shared memory while a thread of the connector sleeps on each, one in poll() and one in select(), since after the park: asleep on the TCP socket that leaves the fd, each is woken (the socket is shut down for reading, nothing sent) and asks again on shm for the time left, reports nothing before the acceptor writes, then wakes when it does and reads its bytes intact */
/* Channels: shm */
#include "shimtest.h"

#include <sys/select.h>

#define N	(64u << 10)

static int server(int ctl)
{
	int lfd, fd[2];
	char go;

	fd[0] = t_serve_one(ctl, &lfd);
	fd[1] = accept(lfd, NULL, NULL);
	CHECK(fd[1] >= 0 && t_swapped(fd[1]), "the second connection is on shm");
	for (int i = 0; i < 2; i++) {
		/* The connector says when both connections are on shm again. */
		CHECK(read(ctl, &go, 1) == 1, "the connector's go %d", i);
		CHECK(t_send_stream(fd[i], N, (uint8_t)(5 + i)) == 0, "the acceptor's bytes after the move, %d", i);
		/* Open until the connector has them: its wake-up must come from the bytes, not an EOF. */
		CHECK(read(ctl, &go, 1) == 1, "the connector's done %d", i);
		close(fd[i]);
	}
	close(lfd);
	return t_exit_code();
}

struct sleeper {
	int fd, use_select, woke;
};

static void *sleep_in_wait(void *arg)
{
	struct sleeper *s = arg;

	if (s->use_select) {
		fd_set r;

		FD_ZERO(&r);
		FD_SET(s->fd, &r);
		s->woke = select(s->fd + 1, &r, NULL, NULL, &(struct timeval){ .tv_sec = 10 }) == 1 &&
			  FD_ISSET(s->fd, &r);
	} else {
		struct pollfd p = { s->fd, POLLIN, 0 };

		s->woke = poll(&p, 1, 10000) == 1 && (p.revents & POLLIN);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct sleeper s[2];
	pthread_t t[2];
	uint16_t port;
	int64_t end;
	int ctl;
	pid_t pid;

	(void)argc;
	setenv("FF_TEST_PARK_MS", "100", 1);
	setenv("FF_TEST_RESUME_MS", "600", 1);
	t_shim_setup(argv, FA_BROKER);
	port = t_fork_server(server, &ctl, &pid);
	for (int i = 0; i < 2; i++) {
		s[i] = (struct sleeper){ t_connect(AF_INET, port), i, 0 };
		CHECK(t_swapped(s[i].fd), "connection %d is on shm", i);
	}
	for (end = t_ms() + 5000; t_ms() < end && (t_real_domain(s[0].fd) != AF_INET || t_real_domain(s[1].fd) != AF_INET);)
		usleep(1000);
	CHECK(t_real_domain(s[0].fd) == AF_INET && t_real_domain(s[1].fd) == AF_INET, "not parked in 5 s");
	for (int i = 0; i < 2; i++)
		CHECK(!pthread_create(&t[i], NULL, sleep_in_wait, &s[i]), "thread");
	CHECK(t_ledger_entries_await(FF_PATH_SHM, "", 4) == 4, "%d ends are listed shm 5 s after the park, want 4",
	      t_ledger_entries(FF_PATH_SHM, ""));
	for (int i = 0; i < 2; i++) {
		usleep(100000);
		CHECK(!s[i].woke, "the %s woke before any byte came", i ? "select" : "poll");
		CHECK(write(ctl, "g", 1) == 1, "go");
		pthread_join(t[i], NULL);
		CHECK(s[i].woke, "the %s asleep across the move did not report the bytes", i ? "select" : "poll");
		CHECK(t_recv_stream(s[i].fd, N, (uint8_t)(5 + i)) == 0, "the acceptor's bytes after the move, %d", i);
		CHECK(write(ctl, "d", 1) == 1, "done");
		close(s[i].fd);
	}
	t_wait_child(pid, "the acceptor");
	return t_exit_code();
}
