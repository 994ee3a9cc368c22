/* SPDX-License-Identifier: MIT */
/* Description: moving down (here before fork) keeps what the program set on both ends, the one that moves and the one that adopts: the fd number, O_NONBLOCK, FD_CLOEXEC, SO_RCVTIMEO, SO_SNDBUF, TCP-level options, the overlay names, epoll registrations (level- and edge-triggered), and bytes unread in the rings come first */
/* Channels: shm shm-link */
#include <netinet/tcp.h>

#include "shimtest.h"

#define UNREAD	(100u << 10)

struct state {
	int fl, fdfl, nodelay, keepidle, sndbuf;
	struct timeval rcvtimeo;
	char local[300], peer[300];
};

static void get_state(int fd, struct state *s)
{
	socklen_t l;

	memset(s, 0, sizeof(*s));
	s->fl = fcntl(fd, F_GETFL) & O_NONBLOCK;
	s->fdfl = fcntl(fd, F_GETFD) & FD_CLOEXEC;
	l = sizeof(int);
	getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &s->nodelay, &l);
	l = sizeof(int);
	getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &s->keepidle, &l);
	l = sizeof(int);
	getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &s->sndbuf, &l);
	l = sizeof(s->rcvtimeo);
	getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &s->rcvtimeo, &l);
	t_name_hex(fd, 0, s->local);
	t_name_hex(fd, 1, s->peer);
}

static void set_state(int fd, int nonblock, int cloexec, int keepidle, int sndbuf, int timeo_s)
{
	struct timeval tv = { .tv_sec = timeo_s };
	int one = 1;

	fcntl(fd, F_SETFL, nonblock ? O_NONBLOCK : 0);
	fcntl(fd, F_SETFD, cloexec ? FD_CLOEXEC : 0);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &keepidle, sizeof(keepidle));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

static void compare(const char *who, const struct state *a, const struct state *b)
{
	CHECK(a->fl == b->fl, "%s: O_NONBLOCK %d, was %d", who, b->fl, a->fl);
	CHECK(a->fdfl == b->fdfl, "%s: FD_CLOEXEC %d, was %d", who, b->fdfl, a->fdfl);
	CHECK(a->nodelay == b->nodelay, "%s: TCP_NODELAY %d, was %d", who, b->nodelay, a->nodelay);
	CHECK(a->keepidle == b->keepidle, "%s: TCP_KEEPIDLE %d, was %d", who, b->keepidle,
	      a->keepidle);
	CHECK(a->sndbuf == b->sndbuf, "%s: SO_SNDBUF %d, was %d", who, b->sndbuf, a->sndbuf);
	CHECK(a->rcvtimeo.tv_sec == b->rcvtimeo.tv_sec, "%s: SO_RCVTIMEO %lds, was %lds", who,
	      (long)b->rcvtimeo.tv_sec, (long)a->rcvtimeo.tv_sec);
	CHECK(!strcmp(a->local, b->local), "%s: local name changed", who);
	CHECK(!strcmp(a->peer, b->peer), "%s: peer name changed", who);
}

/* The one event of fd's registration in ep within 2 s (0: none): its data word. */
static uint64_t event_of(int ep)
{
	struct epoll_event ev;

	return epoll_wait(ep, &ev, 1, 2000) == 1 ? ev.data.u64 : 0;
}

int main(int argc, char **argv)
{
	struct state c0, s0, c1, s1;
	ino_t cino, sino;
	int cfd, sfd, ep, st;
	uint8_t buf[4096];
	ssize_t n;
	pid_t pid;

	(void)argc;
	t_setup_swapped_pair(argv, &cfd, &sfd);
	set_state(cfd, 1, 1, 77, 65536, 20);
	set_state(sfd, 0, 0, 99, 98304, 21);
	get_state(cfd, &c0);
	get_state(sfd, &s0);
	cino = t_ino(cfd);
	sino = t_ino(sfd);
	ep = epoll_create1(EPOLL_CLOEXEC);
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &(struct epoll_event){ .events = EPOLLIN,
		.data.u64 = 41 }) == 0, "epoll_ctl cfd");
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &(struct epoll_event){ .events = EPOLLIN | EPOLLET,
		.data.u64 = 42 }) == 0, "epoll_ctl sfd");
	CHECK(t_send_stream(sfd, UNREAD, 3) == 0, "unread bytes towards cfd");
	CHECK(event_of(ep) == 41, "cfd not readable on shm");
	/* fork moves every shm connection down first: one end moves, the other adopts. */
	pid = fork();
	if (pid == 0)
		_exit(0);
	waitpid(pid, &st, 0);
	CHECK(t_moved_down(cfd, cino) && t_moved_down(sfd, sino), "not moved down by fork");
	CHECK(t_shm_maps() == 0, "shared memory still mapped");
	get_state(cfd, &c1);
	get_state(sfd, &s1);
	compare("moving end", &c0, &c1);
	compare("adopting end", &s0, &s1);
	/* Level-triggered: still readable, the unread bytes are there. */
	CHECK(event_of(ep) == 41, "cfd's epoll registration lost");
	CHECK(t_recv_stream(cfd, UNREAD, 3) == 0, "the unread bytes did not come first");
	n = read(cfd, buf, sizeof(buf));
	CHECK(n == -1 && errno == EAGAIN, "O_NONBLOCK: read gave %zd", n);
	/* Edge-triggered: a new edge when bytes arrive. */
	CHECK(write(cfd, "x", 1) == 1, "write after the move");
	CHECK(event_of(ep) == 42, "sfd's epoll registration lost");
	CHECK(read(sfd, buf, 1) == 1 && buf[0] == 'x', "read after the move");
	close(ep);
	close(cfd);
	CHECK(read(sfd, buf, 1) == 0, "no EOF after close");
	close(sfd);
	return t_shim_finish();
}
