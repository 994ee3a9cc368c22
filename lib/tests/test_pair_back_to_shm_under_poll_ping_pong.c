/* SPDX-License-Identifier: MIT */
/* Description: eight connections moved down to socket pairs (the acceptor forked) go back onto shared memory while, on each, an acceptor thread pings one byte after a random pause (0-1.5 ms) and a connector thread echoes it, asleep in poll() in between: each end's program waits until both ends are in place before it writes again, so no ping goes unanswered (its bell not rung for a poller asleep on the old pair), and every echo is the byte sent */
/* Channels: shm */
#include "shimtest.h"

#include <fcntl.h>
#include <sys/wait.h>

#define CONNS	8
#define RUN_MS	4000

static void *ping(void *arg)
{
	int fd = (int)(intptr_t)arg, n = 0;
	unsigned seed = (unsigned)fd;
	int64_t end = t_ms() + RUN_MS;

	while (t_ms() < end) {
		struct pollfd p = { fd, POLLIN, 0 };
		char c = (char)n, d;

		usleep((useconds_t)(rand_r(&seed) % 1500));
		CHECK(write(fd, &c, 1) == 1, "ping %d on fd %d", n, fd);
		if (poll(&p, 1, 2000) != 1) {
			CHECK(0, "ping %d on fd %d unanswered for 2 s (%d ends on shm)", n, fd,
			      t_ledger_entries(FF_PATH_SHM, ""));
			break;
		}
		CHECK(read(fd, &d, 1) == 1 && d == c, "pong %d on fd %d", n, fd);
		n++;
	}
	close(fd);
	return NULL;
}

static int server(int ctl)
{
	int lfd, fd[CONNS];
	pthread_t t[CONNS];

	fd[0] = t_serve_one(ctl, &lfd);
	for (int i = 1; i < CONNS; i++) {
		fd[i] = accept(lfd, NULL, NULL);
		CHECK(fd[i] >= 0 && t_swapped(fd[i]), "connection %d is on shm", i);
	}
	t_fork_child_exits();
	for (int i = 0; i < CONNS; i++)
		CHECK(!pthread_create(&t[i], NULL, ping, (void *)(intptr_t)fd[i]), "thread");
	for (int i = 0; i < CONNS; i++)
		pthread_join(t[i], NULL);
	close(lfd);
	return t_exit_code();
}

static void *echo(void *arg)
{
	int fd = (int)(intptr_t)arg;

	fcntl(fd, F_SETFL, O_NONBLOCK);
	for (;;) {
		struct pollfd p = { fd, POLLIN, 0 };
		char b[64];
		ssize_t r;

		if (poll(&p, 1, 5000) != 1)
			break;
		r = read(fd, b, sizeof(b));
		if (r == 0)
			break;
		if (r > 0 && write(fd, b, (size_t)r) != r)
			break;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t[CONNS];
	int ctl, fd[CONNS], shm;
	uint16_t port;
	pid_t pid;

	(void)argc;
	setenv("FF_TEST_RESUME_MS", "50", 1);
	t_shim_setup(argv, FA_BROKER);
	port = t_fork_server(server, &ctl, &pid);
	for (int i = 0; i < CONNS; i++) {
		fd[i] = t_connect(AF_INET, port);
		CHECK(t_swapped(fd[i]), "connection %d is on shm", i);
		CHECK(!pthread_create(&t[i], NULL, echo, (void *)(intptr_t)fd[i]), "thread");
	}
	for (int i = 0; i < CONNS; i++)
		pthread_join(t[i], NULL);
	shm = t_agent_count("watch parked");
	t_wait_child(pid, "the acceptor");
	CHECK(shm == 2 * CONNS, "%d ends moved back onto shm, want %d", shm, 2 * CONNS);
	for (int i = 0; i < CONNS; i++)
		close(fd[i]);
	return t_exit_code();
}
