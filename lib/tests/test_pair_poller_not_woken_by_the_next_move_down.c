/* SPDX-License-Identifier: MIT */
/* Description: a thread of the connector asleep in poll() on a socket pair (the acceptor forked) sleeps on through the pair's move back onto shared memory and through the acceptor's next fork, which moves the connection down again (its switch message goes over what had become the bell): poll() reports nothing until the acceptor writes, then POLLIN, and the bytes are intact */
/* Channels: shm */
#include "shimtest.h"

#include <sys/wait.h>

#define N	(64u << 10)

static int server(int ctl)
{
	int lfd, fd = t_serve_one(ctl, &lfd);
	char go;

	t_fork_child_exits();
	CHECK(write(fd, "x", 1) == 1, "the byte after the fork");
	CHECK(t_ledger_entries_await(FF_PATH_SHM, "", 2) == 2, "5 s after the fork %d ends are listed shm, want 2",
	      t_ledger_entries(FF_PATH_SHM, ""));
	t_fork_child_exits();
	usleep(500000);
	CHECK(write(ctl, "w", 1) == 1, "about to write");
	CHECK(t_send_stream(fd, N, 5) == 0, "the acceptor's bytes");
	CHECK(read(ctl, &go, 1) == 1, "the connector's done");
	close(fd);
	close(lfd);
	return t_exit_code();
}

struct sleeper {
	int fd, ctl;
	char before;	/* what the acceptor had said when poll() returned */
	int woke;
};

static void *sleep_in_poll(void *arg)
{
	struct sleeper *s = arg;
	struct pollfd p = { s->fd, POLLIN, 0 };

	s->woke = poll(&p, 1, 15000) == 1 && (p.revents & POLLIN);
	s->before = recv(s->ctl, &s->before, 1, MSG_DONTWAIT) == 1 ? 'w' : '-';
	return NULL;
}

int main(int argc, char **argv)
{
	struct sleeper s = { 0 };
	pthread_t t;
	pid_t pid;
	char x;

	(void)argc;
	setenv("FF_TEST_RESUME_MS", "200", 1);
	t_shim_setup(argv, FA_BROKER);
	s.fd = t_connect_forked(server, &s.ctl, &pid);
	CHECK(read(s.fd, &x, 1) == 1 && x == 'x', "the byte after the fork");
	CHECK(!pthread_create(&t, NULL, sleep_in_poll, &s), "thread");
	pthread_join(t, NULL);
	CHECK(s.woke, "poll() did not report the acceptor's bytes");
	CHECK(s.before == 'w', "poll() returned before the acceptor wrote (at the move back, or the next move down)");
	CHECK(t_recv_stream(s.fd, N, 5) == 0, "the acceptor's bytes");
	CHECK(write(s.ctl, "d", 1) == 1, "done");
	close(s.fd);
	t_wait_child(pid, "the acceptor");
	return t_exit_code();
}
