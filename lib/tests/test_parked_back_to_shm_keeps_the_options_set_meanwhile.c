/* SPDX-License-Identifier: MIT */
/* Description: TCP_NODELAY set on shm, cleared while the connection is parked on TCP, reads 0 once it is back on shm (the option kept for the program was carried from the TCP socket only when it differed from the default, so the value set on shm came back) */
/* Channels: shm */
#include "shimtest.h"

#include <netinet/tcp.h>

static int server(int ctl)
{
	int lfd, fd = t_serve_one(ctl, &lfd);
	char go;

	CHECK(read(ctl, &go, 1) == 1, "the connector's end");
	close(fd);
	close(lfd);
	return t_exit_code();
}

static int nodelay(int fd)
{
	int v = -1;
	socklen_t l = sizeof(v);

	CHECK(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &l) == 0, "getsockopt TCP_NODELAY");
	return v;
}

static void await_domain(int fd, int family, const char *what)
{
	int64_t end = t_ms() + 3000;

	while (t_ms() < end && t_real_domain(fd) != family)
		usleep(1000);
	CHECK(t_real_domain(fd) == family, "not %s within 3 s", what);
}

int main(int argc, char **argv)
{
	int ctl, fd;
	pid_t pid;

	(void)argc;
	setenv("FF_TEST_PARK_MS", "150", 1);
	setenv("FF_TEST_RESUME_MS", "800", 1);
	t_shim_setup(argv, FA_BROKER);
	fd = t_connect_forked(server, &ctl, &pid);
	CHECK(!setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){ 1 }, sizeof(int)) && nodelay(fd) == 1, "on shm: set 1");
	await_domain(fd, AF_INET, "parked");
	CHECK(nodelay(fd) == 1, "parked: TCP_NODELAY reads %d, set 1 on shm", nodelay(fd));
	CHECK(!setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int){ 0 }, sizeof(int)) && nodelay(fd) == 0, "parked: set 0");
	await_domain(fd, AF_UNIX, "back on shm");
	CHECK(nodelay(fd) == 0, "back on shm: TCP_NODELAY reads %d; the program set 0 last", nodelay(fd));
	CHECK(write(ctl, "e", 1) == 1, "the end");
	close(fd);
	t_wait_child(pid, "the acceptor");
	return t_exit_code();
}
