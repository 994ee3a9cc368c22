/* SPDX-License-Identifier: MIT */
/* Description: after the swap TCP_NODELAY, SO_KEEPALIVE, TCP_KEEPIDLE, SO_RCVBUF/SO_SNDBUF (a TCP connection's sizes unless set), SO_ERROR, TCP_INFO, SO_DOMAIN/SO_PROTOCOL/SO_TYPE, IP_TOS succeed with sensible values; options set before connect are carried */
/* Channels: unix host-tcp shm shm-link */
#include <netinet/tcp.h>

#include "shimtest.h"

static int get_int(int fd, int level, int name)
{
	int v = -12345;
	socklen_t l = sizeof(v);

	if (getsockopt(fd, level, name, &v, &l) || l != sizeof(v))
		return -12345;
	return v;
}

static int set_int(int fd, int level, int name, int v)
{
	return setsockopt(fd, level, name, &v, sizeof(v));
}

/* A client whose TCP_NODELAY and SO_RCVTIMEO were set before connect. */
static void *connect_with_opts(void *p)
{
	struct t_conn_arg *a = p;
	struct sockaddr_storage ss;
	socklen_t len = t_addr(AF_INET, &ss, a->port);
	struct timeval tv = { .tv_sec = 0, .tv_usec = 100000 };

	a->fd = socket(AF_INET, SOCK_STREAM, 0);
	set_int(a->fd, IPPROTO_TCP, TCP_NODELAY, 1);
	setsockopt(a->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(a->fd, (void *)&ss, len))
		a->fd = -1;
	return NULL;
}

int main(int argc, char **argv)
{
	struct t_conn_arg a = { .family = AF_INET };
	struct tcp_info ti;
	socklen_t tl = sizeof(ti);
	pthread_t th;
	int lfd, sfd, fd;
	char c;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen(AF_INET, &a.port);
	pthread_create(&th, NULL, connect_with_opts, &a);
	sfd = accept(lfd, NULL, NULL);
	pthread_join(th, NULL);
	fd = a.fd;
	CHECK(fd >= 0 && t_swapped(fd), "not swapped");

	CHECK(get_int(fd, IPPROTO_TCP, TCP_NODELAY) == 1, "TCP_NODELAY set before connect was lost");
	CHECK(read(fd, &c, 1) == -1 && errno == EAGAIN, "SO_RCVTIMEO set before connect was lost");
	CHECK(set_int(fd, IPPROTO_TCP, TCP_NODELAY, 0) == 0, "set TCP_NODELAY: %s", strerror(errno));
	CHECK(get_int(fd, IPPROTO_TCP, TCP_NODELAY) == 0, "TCP_NODELAY did not stick");
	CHECK(set_int(fd, SOL_SOCKET, SO_KEEPALIVE, 1) == 0, "set SO_KEEPALIVE: %s", strerror(errno));
	CHECK(get_int(fd, SOL_SOCKET, SO_KEEPALIVE) == 1, "SO_KEEPALIVE");
	CHECK(get_int(fd, IPPROTO_TCP, TCP_KEEPIDLE) == 7200, "default TCP_KEEPIDLE");
	CHECK(set_int(fd, IPPROTO_TCP, TCP_KEEPIDLE, 30) == 0 &&
	      get_int(fd, IPPROTO_TCP, TCP_KEEPIDLE) == 30, "TCP_KEEPIDLE");
	CHECK(set_int(fd, SOL_SOCKET, SO_RCVBUF, 1 << 18) == 0, "set SO_RCVBUF: %s", strerror(errno));
	CHECK(get_int(fd, SOL_SOCKET, SO_RCVBUF) >= 1 << 18, "SO_RCVBUF %d", get_int(fd, SOL_SOCKET, SO_RCVBUF));
	/* Not the agent's tens of MiB of a unix channel: what a TCP connection starts with. */
	CHECK(get_int(fd, SOL_SOCKET, SO_SNDBUF) > 0 && get_int(fd, SOL_SOCKET, SO_SNDBUF) <= 4 << 20,
	      "SO_SNDBUF %d", get_int(fd, SOL_SOCKET, SO_SNDBUF));
	CHECK(get_int(sfd, SOL_SOCKET, SO_SNDBUF) > 0 && get_int(sfd, SOL_SOCKET, SO_SNDBUF) <= 4 << 20,
	      "the acceptor's SO_SNDBUF %d", get_int(sfd, SOL_SOCKET, SO_SNDBUF));
	CHECK(get_int(fd, SOL_SOCKET, SO_ERROR) == 0, "SO_ERROR");
	CHECK(get_int(fd, SOL_SOCKET, SO_DOMAIN) == AF_INET, "SO_DOMAIN %d", get_int(fd, SOL_SOCKET, SO_DOMAIN));
	CHECK(get_int(fd, SOL_SOCKET, SO_PROTOCOL) == IPPROTO_TCP, "SO_PROTOCOL");
	CHECK(get_int(fd, SOL_SOCKET, SO_TYPE) == SOCK_STREAM, "SO_TYPE");
	CHECK(set_int(fd, IPPROTO_IP, IP_TOS, 0x10) == 0 && get_int(fd, IPPROTO_IP, IP_TOS) == 0x10, "IP_TOS");
	CHECK(get_int(fd, IPPROTO_IP, IP_TTL) == 64, "IP_TTL");
	CHECK(getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0 && tl == sizeof(ti) &&
	      ti.tcpi_state == TCP_ESTABLISHED, "TCP_INFO");
	CHECK(get_int(fd, IPPROTO_TCP, TCP_MAXSEG) > 0, "TCP_MAXSEG");
	CHECK(setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, "cubic", 5) == 0, "set TCP_CONGESTION");
	/* Still a working connection. */
	CHECK(write(sfd, "z", 1) == 1 && read(fd, &c, 1) == 1 && c == 'z', "data after sockopts");
	close(fd);
	close(sfd);
	close(lfd);
	CHECK(t_fast_await(1) == 1, "%d fast connections", t_fast_conns());
	return t_shim_finish();
}
