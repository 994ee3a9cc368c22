/* SPDX-License-Identifier: MIT */
/* Description: a thread of the connector asleep in poll() in the kernel on a socket pair (the acceptor forked) when the connection goes back onto shared memory is asked again through the shim, and while another thread takes the bytes that came, it sleeps (not arming the consumer for itself any more, which left the bell undrained and the wait spinning at full CPU until its timeout): whether it reports the byte or sleeps to its timeout, it uses little CPU, and the reader gets the byte */
/* Channels: shm */
#include "shimtest.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <time.h>

static int server(int ctl)
{
	int lfd, fd = t_serve_one(ctl, &lfd);
	char go;

	t_fork_child_exits();
	CHECK(write(fd, "x", 1) == 1, "x");
	CHECK(read(ctl, &go, 1) == 1, "go");
	CHECK(write(fd, "y", 1) == 1, "y");
	CHECK(read(ctl, &go, 1) == 1, "done");
	close(fd);
	close(lfd);
	return t_exit_code();
}

static int cfd;
static _Atomic int got;
static double cpu, wall;

static double now_clock(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *poller(void *arg)
{
	struct pollfd p = { cfd, POLLIN, 0 };
	double c0 = now_clock(CLOCK_THREAD_CPUTIME_ID), w0 = now_clock(CLOCK_MONOTONIC);
	(void)arg;
	poll(&p, 1, 8000);
	cpu = now_clock(CLOCK_THREAD_CPUTIME_ID) - c0;
	wall = now_clock(CLOCK_MONOTONIC) - w0;
	return NULL;
}

static void *reader(void *arg)
{
	int64_t end = t_ms() + 10000;

	(void)arg;
	while (!got && t_ms() < end) {
		char b;

		/* Busy: it should take the byte before the poller looks at the rings. */
		if (recv(cfd, &b, 1, MSG_DONTWAIT) == 1)
			got++;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t[2];
	int ctl;
	pid_t pid;
	char x;

	(void)argc;
	setenv("FF_TEST_RESUME_MS", "100", 1);
	t_shim_setup(argv, FA_BROKER);
	cfd = t_connect_forked(server, &ctl, &pid);
	CHECK(read(cfd, &x, 1) == 1 && x == 'x', "x");
	fcntl(cfd, F_SETFL, O_NONBLOCK);
	CHECK(!pthread_create(&t[0], NULL, poller, NULL), "thread");
	CHECK(!pthread_create(&t[1], NULL, reader, NULL), "thread");
	CHECK(t_ledger_entries_await(FF_PATH_SHM, "", 2) == 2, "shm");
	CHECK(write(ctl, "g", 1) == 1, "go");
	pthread_join(t[1], NULL);
	pthread_join(t[0], NULL);
	CHECK(got == 1, "got %d", got);
	CHECK(cpu < 1.0, "the poller burned %.3f s of CPU in %.3f s of poll()", cpu, wall);
	CHECK(write(ctl, "d", 1) == 1, "done");
	t_wait_child(pid, "the acceptor");
	close(cfd);
	return t_exit_code();
}
