/* SPDX-License-Identifier: MIT */
/* Description: writing to a connection whose peer closed after reading everything is accepted once, as TCP accepts it (the bytes go nowhere, the peer's kernel answers with a reset), and fails with EPIPE after that; perftest's last handshake write after its server exited was killed by SIGPIPE on shm; a peer that closed with bytes unread refuses the first write already */
/* Channels: host-tcp shm shm-link */
#include <netinet/tcp.h>
#include <pthread.h>

#include "shimtest.h"

/* Connect and accept one connection on lfd: *c the client end, *s the server's. */
static void pair(int lfd, uint16_t port, int *c, int *s)
{
	struct t_conn_arg a = { .family = AF_INET, .port = port };
	pthread_t th;

	pthread_create(&th, NULL, t_connect_thread, &a);
	*s = accept(lfd, NULL, NULL);
	pthread_join(th, NULL);
	*c = a.fd;
	CHECK(*c >= 0 && *s >= 0 && t_swapped(*c), "not swapped");
}

/* Send one byte at a time until one fails (each after waiting for room): the errno, or 0. */
static int until_refused(int fd)
{
	for (int i = 0; i < 200; i++) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };

		poll(&p, 1, 10);
		if (send(fd, "y", 1, MSG_NOSIGNAL) < 0)
			return errno;
	}
	return 0;
}

int main(int argc, char **argv)
{
	uint16_t port;
	int lfd, c, s, err;
	char b;

	(void)argc;
	signal(SIGPIPE, SIG_IGN);
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen(AF_INET, &port);

	/* The peer read everything, then closed: the first write is taken. */
	pair(lfd, port, &c, &s);
	CHECK(send(c, "a", 1, 0) == 1 && read(s, &b, 1) == 1, "one byte across");
	close(s);
	CHECK(read(c, &b, 1) == 0, "no end of stream after the peer closed");
	CHECK(send(c, "late", 4, 0) == 4, "the first write after the peer closed: %s, want 4 bytes taken, as TCP",
	      strerror(errno));
	err = until_refused(c);
	CHECK(err == EPIPE, "writes after that: %s, want EPIPE", err ? strerror(err) : "all taken");
	close(c);

	/* The peer closed with a byte unread: no write is taken. */
	pair(lfd, port, &c, &s);
	CHECK(send(c, "u", 1, 0) == 1, "one byte");
	close(s);
	err = until_refused(c);
	CHECK(err == EPIPE || err == ECONNRESET, "writes to a peer that closed with a byte unread: %s",
	      err ? strerror(err) : "all taken");
	close(c);
	close(lfd);
	return t_shim_finish();
}
