/* SPDX-License-Identifier: MIT */
/* Description: socket options the program chose before the swap reach the handed channel itself: TCP_NODELAY off (the default, although the agent's Go sockets have it on) or on, SO_KEEPALIVE, SO_RCVBUF/SO_SNDBUF set on the socket or inherited from the listener; sizes it did not set are left to the kernel */
/* Channels: unix host-tcp shm shm-link */
#include <netinet/tcp.h>

#include "shimtest.h"

#define SIZE	40000	/* not a default: tcp_rmem[1] is 131072 = 2 * 65536 */

static int get_int(int fd, int level, int name)
{
	int v = -12345;
	socklen_t l = sizeof(v);

	if (getsockopt(fd, level, name, &v, &l))
		return -12345;
	return v;
}

static void set_int(int fd, int level, int name, int v)
{
	CHECK(setsockopt(fd, level, name, &v, sizeof(v)) == 0, "setsockopt %d/%d: %s", level, name,
	      strerror(errno));
}

struct client {
	uint16_t port;
	int tuned;	/* set every option before connect */
	int fd, rcv, snd;	/* the sizes as the kernel reported them before connect */
};

static void *client(void *p)
{
	struct client *a = p;
	struct sockaddr_storage ss;
	socklen_t len = t_addr(AF_INET, &ss, a->port);

	a->fd = socket(AF_INET, SOCK_STREAM, 0);
	if (a->tuned) {
		set_int(a->fd, IPPROTO_TCP, TCP_NODELAY, 1);
		set_int(a->fd, SOL_SOCKET, SO_KEEPALIVE, 1);
		set_int(a->fd, SOL_SOCKET, SO_RCVBUF, SIZE);
		set_int(a->fd, SOL_SOCKET, SO_SNDBUF, SIZE);
	}
	a->rcv = get_int(a->fd, SOL_SOCKET, SO_RCVBUF);
	a->snd = get_int(a->fd, SOL_SOCKET, SO_SNDBUF);
	if (connect(a->fd, (void *)&ss, len))
		a->fd = -1;
	return NULL;
}

/* Real option values of the channel, past the shim; TCP level only exists on host-tcp. */
static void check_client(struct client *a)
{
	const char *how = a->tuned ? "tuned" : "default";
	int fd = a->fd, tcp = fa_host_tcp();

	CHECK(fd >= 0 && t_swapped(fd), "%s: not swapped", how);
	CHECK(get_int(fd, IPPROTO_TCP, TCP_NODELAY) == a->tuned, "%s: TCP_NODELAY %d", how,
	      get_int(fd, IPPROTO_TCP, TCP_NODELAY));
	CHECK(!tcp || t_real_sockopt(fd, IPPROTO_TCP, TCP_NODELAY) == a->tuned,
	      "%s: the channel's real TCP_NODELAY is %d", how,
	      t_real_sockopt(fd, IPPROTO_TCP, TCP_NODELAY));
	CHECK(t_real_sockopt(fd, SOL_SOCKET, SO_KEEPALIVE) == a->tuned,
	      "%s: the channel's real SO_KEEPALIVE is %d", how,
	      t_real_sockopt(fd, SOL_SOCKET, SO_KEEPALIVE));
	if (a->tuned) {
		CHECK(t_real_sockopt(fd, SOL_SOCKET, SO_RCVBUF) == a->rcv,
		      "SO_RCVBUF: channel %d, set before connect %d",
		      t_real_sockopt(fd, SOL_SOCKET, SO_RCVBUF), a->rcv);
		CHECK(t_real_sockopt(fd, SOL_SOCKET, SO_SNDBUF) == a->snd,
		      "SO_SNDBUF: channel %d, set before connect %d",
		      t_real_sockopt(fd, SOL_SOCKET, SO_SNDBUF), a->snd);
		CHECK(get_int(fd, SOL_SOCKET, SO_RCVBUF) == a->rcv, "SO_RCVBUF as the program sees it");
	}
}

int main(int argc, char **argv)
{
	struct client a[2] = { { .tuned = 0 }, { .tuned = 1 } };
	int lfd, sfd, lrcv;
	uint16_t port;
	char c;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen(AF_INET, &port);
	for (int i = 0; i < 2; i++) {
		pthread_t th;

		a[i].port = port;
		pthread_create(&th, NULL, client, &a[i]);
		sfd = accept(lfd, NULL, NULL);
		pthread_join(th, NULL);
		check_client(&a[i]);
		CHECK(write(sfd, "z", 1) == 1 && read(a[i].fd, &c, 1) == 1 && c == 'z', "data");
		close(sfd);
		close(a[i].fd);
	}
	close(lfd);

	/* A size set on the listener is inherited by what it accepts, as in TCP. */
	{
		struct sockaddr_storage ss;
		socklen_t len = t_addr(AF_INET, &ss, 0);
		struct t_conn_arg ca = { .family = AF_INET };
		pthread_t th;

		lfd = socket(AF_INET, SOCK_STREAM, 0);
		set_int(lfd, SOL_SOCKET, SO_RCVBUF, SIZE);
		lrcv = get_int(lfd, SOL_SOCKET, SO_RCVBUF);
		CHECK(bind(lfd, (void *)&ss, len) == 0 && listen(lfd, 4) == 0, "listen");
		len = sizeof(ss);
		getsockname(lfd, (void *)&ss, &len);
		ca.port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		pthread_create(&th, NULL, t_connect_thread, &ca);
		sfd = accept(lfd, NULL, NULL);
		pthread_join(th, NULL);
		CHECK(t_swapped(sfd), "accepted: not swapped");
		CHECK(t_real_sockopt(sfd, SOL_SOCKET, SO_RCVBUF) == lrcv,
		      "accepted: channel SO_RCVBUF %d, listener's %d",
		      t_real_sockopt(sfd, SOL_SOCKET, SO_RCVBUF), lrcv);
		close(sfd);
		close(ca.fd);
		close(lfd);
	}
	return t_shim_finish();
}
