/* SPDX-License-Identifier: MIT */
/* Description: threads of the connector dup() a connection moved down to a socket pair (the acceptor forked), write one byte on the copy and close it, over and over while the connection goes back onto shared memory: a copy made during the move's hold goes onto shm with the others (not left on what became the bell, whose bytes the acceptor would take for a broken peer's), so every byte arrives, once, and the connection lives on */
/* Channels: shm */
#include "shimtest.h"

#include <fcntl.h>
#include <sys/wait.h>

#define RUN_MS	3000
#define THREADS	4

static int server(int ctl)
{
	int lfd, fd = t_serve_one(ctl, &lfd);
	long n = 0, bad = 0, want = -1;

	t_fork_child_exits();
	CHECK(write(ctl, "f", 1) == 1, "forked");
	fcntl(fd, F_SETFL, O_NONBLOCK);
	for (;;) {
		struct pollfd p = { fd, POLLIN, 0 };
		char b[256];
		ssize_t r;

		if (poll(&p, 1, 8000) != 1) {
			CHECK(0, "nothing for 8 s after %ld bytes", n);
			break;
		}
		r = read(fd, b, sizeof(b));
		if (r == 0)
			break;
		if (r < 0 && errno == EAGAIN)
			continue;
		if (r < 0) {
			CHECK(0, "read after %ld bytes: %s", n, strerror(errno));
			break;
		}
		for (ssize_t i = 0; i < r; i++)
			bad += b[i] != 'a';
		n += r;
	}
	CHECK(read(ctl, &want, sizeof(want)) == sizeof(want), "count");
	CHECK(bad == 0 && n == want, "got %ld bytes (%ld bad), want %ld", n, bad, want);
	close(fd);
	close(lfd);
	return t_exit_code();
}

static int cfd;
static _Atomic long sent;

static void *dupper(void *arg)
{
	int64_t end = t_ms() + RUN_MS;

	(void)arg;
	while (t_ms() < end) {
		int d = dup(cfd);

		if (d < 0)
			continue;
		if (write(d, "a", 1) == 1)
			sent++;
		close(d);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t[THREADS];
	int ctl;
	pid_t pid;
	char go;
	long n;

	(void)argc;
	setenv("FF_TEST_RESUME_MS", "100", 1);
	t_shim_setup(argv, FA_BROKER);
	cfd = t_connect_forked(server, &ctl, &pid);
	CHECK(read(ctl, &go, 1) == 1, "forked");
	for (int i = 0; i < THREADS; i++)
		CHECK(!pthread_create(&t[i], NULL, dupper, NULL), "thread");
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	CHECK(t_agent_count("watch parked") == 2, "%d ends moved back onto shm, want 2", t_agent_count("watch parked"));
	shutdown(cfd, SHUT_WR);
	n = sent;
	CHECK(write(ctl, &n, sizeof(n)) == sizeof(n), "count");
	t_wait_child(pid, "the acceptor");
	close(cfd);
	return t_exit_code();
}
