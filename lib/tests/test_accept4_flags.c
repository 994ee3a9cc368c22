/* SPDX-License-Identifier: MIT */
/* Description: accept4 with SOCK_NONBLOCK|SOCK_CLOEXEC keeps both flags on the swapped fd, accept4 with 0 keeps neither */
/* Channels: unix host-tcp shm shm-link */
#include "shimtest.h"

static void one(int lfd, uint16_t port, int flags)
{
	struct t_conn_arg a = { .family = AF_INET, .port = port };
	pthread_t th;
	int fd;

	pthread_create(&th, NULL, t_connect_thread, &a);
	fd = accept4(lfd, NULL, NULL, flags);
	pthread_join(th, NULL);
	CHECK(fd >= 0, "accept4: %s", strerror(errno));
	CHECK(t_swapped(fd), "flags %#x: not swapped", flags);
	CHECK(!!(fcntl(fd, F_GETFL) & O_NONBLOCK) == !!(flags & SOCK_NONBLOCK),
	      "flags %#x: O_NONBLOCK is %d", flags, !!(fcntl(fd, F_GETFL) & O_NONBLOCK));
	CHECK(!!(fcntl(fd, F_GETFD) & FD_CLOEXEC) == !!(flags & SOCK_CLOEXEC),
	      "flags %#x: FD_CLOEXEC is %d", flags, !!(fcntl(fd, F_GETFD) & FD_CLOEXEC));
	if (flags & SOCK_NONBLOCK) {
		char c;

		CHECK(read(fd, &c, 1) == -1 && errno == EAGAIN, "non-blocking read did not say EAGAIN");
	}
	close(fd);
	close(a.fd);
}

int main(int argc, char **argv)
{
	uint16_t port;
	int lfd;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen(AF_INET, &port);
	one(lfd, port, SOCK_NONBLOCK | SOCK_CLOEXEC);
	one(lfd, port, 0);
	one(lfd, port, SOCK_NONBLOCK);
	one(lfd, port, SOCK_CLOEXEC);
	close(lfd);
	CHECK(t_fast_await(4) == 4, "%d fast connections", t_fast_conns());
	return t_shim_finish();
}
