/* SPDX-License-Identifier: MIT */
/* Description: one poll() over an shm connection and a parked one, asleep while the parked one goes back onto shared memory (and the shm one is parked, then goes back too), with nothing written: it reports nothing, and times out (a poll that also watches an shm fd is the shim's, which took what the kernel said of the parked fd, now the new bell with the peer's doorbell, for data: POLLIN, and a read then found nothing) */
/* Channels: shm */
#include "shimtest.h"

#include <fcntl.h>

static int server(int ctl)
{
	int lfd, fd[2];
	char go;

	t_serve_two(ctl, &lfd, fd);
	CHECK(read(ctl, &go, 1) == 1, "the connector's end");
	close(fd[0]);
	close(fd[1]);
	close(lfd);
	return t_exit_code();
}

int main(int argc, char **argv)
{
	struct pollfd p[2];
	int64_t t0 = t_ms();
	int ctl, a, b, ret;
	uint16_t port;
	pid_t pid;

	(void)argc;
	setenv("FF_TEST_PARK_MS", "150", 1);
	setenv("FF_TEST_RESUME_MS", "1000", 1);
	t_shim_setup(argv, FA_BROKER);
	port = t_fork_server(server, &ctl, &pid);
	a = t_connect(AF_INET, port);
	CHECK(t_swapped(a), "the first connection is on shm");
	while (t_real_domain(a) != AF_INET && t_ms() < t0 + 800)
		usleep(1000);
	CHECK(t_real_domain(a) == AF_INET, "the first connection was not parked");
	b = t_connect(AF_INET, port);
	CHECK(t_swapped(b) && t_real_domain(b) == AF_UNIX, "the second connection is on shm");
	fcntl(a, F_SETFL, O_NONBLOCK);
	fcntl(b, F_SETFL, O_NONBLOCK);
	p[0] = (struct pollfd){ b, POLLIN, 0 };
	p[1] = (struct pollfd){ a, POLLIN, 0 };
	ret = poll(p, 2, 3000);
	CHECK(ret == 0, "poll over both with nothing written: %d, revents %#x (shm) and %#x (parked, then shm)", ret,
	      p[0].revents, p[1].revents);
	CHECK(t_real_domain(a) == AF_UNIX, "the parked connection did not go back onto shm during the poll");
	CHECK(write(ctl, "e", 1) == 1, "the end");
	close(a);
	close(b);
	t_wait_child(pid, "the acceptor");
	return t_exit_code();
}
