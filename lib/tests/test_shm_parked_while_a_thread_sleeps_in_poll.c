/* SPDX-License-Identifier: MIT */
/* Description: two shm connections are parked on TCP while a thread of the connector sleeps on each, one in poll() and one in select(): woken by the bell's shutdown, each looks at its fd again only once the TCP socket is there, so it sleeps on, now on that socket, reports nothing before the acceptor writes, and wakes as soon as it does (before, the park put the socket at the fd before the sleeper looked, and it slept on, on the bell only, through the bytes until its timeout: a python client's poll() before each recv stalled its whole migration) */
/* Channels: shm */
#include "shimtest.h"

#include <stdatomic.h>
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
		CHECK(read(ctl, &go, 1) == 1, "the connector's go %d", i);
		CHECK(t_send_stream(fd[i], N, (uint8_t)(5 + i)) == 0, "the acceptor's bytes after the park, %d", i);
		CHECK(read(ctl, &go, 1) == 1, "the connector's done %d", i);
		close(fd[i]);
	}
	close(lfd);
	return t_exit_code();
}

struct sleeper {
	int fd, use_select;
	_Atomic int woke;	/* 0 asleep; 1 reported the fd readable; -1 returned otherwise */
};

static void *sleep_in_wait(void *arg)
{
	struct sleeper *s = arg;
	int ok;

	if (s->use_select) {
		fd_set r;

		FD_ZERO(&r);
		FD_SET(s->fd, &r);
		ok = select(s->fd + 1, &r, NULL, NULL, &(struct timeval){ .tv_sec = 10 }) == 1 && FD_ISSET(s->fd, &r);
	} else {
		struct pollfd p = { s->fd, POLLIN, 0 };

		ok = poll(&p, 1, 10000) == 1 && (p.revents & POLLIN);
	}
	atomic_store(&s->woke, ok ? 1 : -1);
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
	setenv("FF_TEST_PARK_MS", "300", 1);
	t_shim_setup(argv, FA_BROKER);
	port = t_fork_server(server, &ctl, &pid);
	for (int i = 0; i < 2; i++) {
		s[i] = (struct sleeper){ t_connect(AF_INET, port), i, 0 };
		CHECK(t_swapped(s[i].fd), "connection %d is on shm", i);
		CHECK(!pthread_create(&t[i], NULL, sleep_in_wait, &s[i]), "thread");
	}
	for (end = t_ms() + 5000; t_ms() < end && (t_real_domain(s[0].fd) != AF_INET || t_real_domain(s[1].fd) != AF_INET);)
		usleep(1000);
	CHECK(t_real_domain(s[0].fd) == AF_INET && t_real_domain(s[1].fd) == AF_INET, "not parked in 5 s");
	for (int i = 0; i < 2; i++) {
		usleep(100000);
		CHECK(!atomic_load(&s[i].woke), "the %s returned before any byte came", i ? "select" : "poll");
		CHECK(write(ctl, "g", 1) == 1, "go");
		for (end = t_ms() + 2000; t_ms() < end && !atomic_load(&s[i].woke);)
			usleep(1000);
		CHECK(atomic_load(&s[i].woke) == 1, "the %s asleep across the park did not report the bytes within 2 s",
		      i ? "select" : "poll");
		pthread_join(t[i], NULL);
		CHECK(t_recv_stream(s[i].fd, N, (uint8_t)(5 + i)) == 0, "the acceptor's bytes after the park, %d", i);
		CHECK(write(ctl, "d", 1) == 1, "done");
		close(s[i].fd);
	}
	t_wait_child(pid, "the acceptor");
	return t_exit_code();
}
