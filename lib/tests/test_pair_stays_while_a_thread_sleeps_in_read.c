/* SPDX-License-Identifier: MIT */
/* Description: connections moved down to socket pairs (the acceptor forked) on which a thread of the connector sleeps in a blocking read() are not moved back onto shared memory while it sleeps (after the move it would sleep on the channel's bell, and read doorbells as data): one reader went to sleep on shm before the fork (it adopted the move down inside its read and went on in the kernel), one on the pair after it; each try is refused at once, the pairs carry the acceptor's bytes to the sleepers intact, and once no thread sleeps on them the connections do move back */
/* Channels: shm */
#include "shimtest.h"

#include <sys/wait.h>

#define N	(64u << 10)

static int server(int ctl)
{
	int lfd, fd[2];
	char go;

	fd[0] = t_serve_one(ctl, &lfd);
	fd[1] = accept(lfd, NULL, NULL);
	CHECK(fd[1] >= 0 && t_swapped(fd[1]), "the second connection is on shm");
	/* The connector's first reader is asleep on shm now. */
	CHECK(read(ctl, &go, 1) == 1, "the connector's fork");
	t_fork_child_exits();
	CHECK(write(fd[1], "x", 1) == 1, "the byte after the fork");
	CHECK(read(ctl, &go, 1) == 1, "the connector's go");
	for (int i = 0; i < 2; i++)
		CHECK(t_send_stream(fd[i], N, (uint8_t)(5 + i)) == 0, "the acceptor's bytes to sleeper %d", i);
	CHECK(read(ctl, &go, 1) == 1, "the connector's done");
	close(fd[0]);
	close(fd[1]);
	close(lfd);
	return t_exit_code();
}

struct sleeper {
	int fd, seed, ok;
};

static void *sleep_in_read(void *arg)
{
	struct sleeper *s = arg;

	s->ok = t_recv_stream(s->fd, N, (uint8_t)s->seed) == 0;
	return NULL;
}

int main(int argc, char **argv)
{
	struct sleeper s[2];
	pthread_t t[2];
	int ctl, refused;
	uint16_t port;
	pid_t pid;
	char x;

	(void)argc;
	setenv("FF_TEST_RESUME_MS", "200", 1);
	t_shim_setup(argv, FA_BROKER);
	port = t_fork_server(server, &ctl, &pid);
	for (int i = 0; i < 2; i++) {
		s[i] = (struct sleeper){ t_connect(AF_INET, port), 5 + i, 0 };
		CHECK(t_swapped(s[i].fd), "connection %d is on shm", i);
	}
	CHECK(!pthread_create(&t[0], NULL, sleep_in_read, &s[0]), "thread");
	usleep(200000);
	CHECK(write(ctl, "f", 1) == 1, "fork");
	CHECK(read(s[1].fd, &x, 1) == 1 && x == 'x', "the byte after the fork");
	CHECK(!pthread_create(&t[1], NULL, sleep_in_read, &s[1]), "thread");
	/* The acceptor's fork fences moves for 2 s; then a try each 200 ms. */
	usleep(3500000);
	refused = t_agent_count("watch not-parked");
	CHECK(t_ledger_entries(FF_PATH_UNIX, "moved-down") == 4, "%d ends are socket pairs while threads sleep in read(), want 4 (%d shm)",
	      t_ledger_entries(FF_PATH_UNIX, "moved-down"), t_ledger_entries(FF_PATH_SHM, ""));
	CHECK(refused >= 8, "only %d ends refused a move in 3.5 s", refused);
	CHECK(write(ctl, "g", 1) == 1, "go");
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		CHECK(s[i].ok, "sleeper %d's bytes", i);
	}
	CHECK(t_ledger_entries_await(FF_PATH_SHM, "", 4) == 4, "5 s after the sleepers left %d ends are listed shm, want 4",
	      t_ledger_entries(FF_PATH_SHM, ""));
	CHECK(write(ctl, "d", 1) == 1, "done");
	close(s[0].fd);
	close(s[1].fd);
	t_wait_child(pid, "the acceptor");
	return t_exit_code();
}
