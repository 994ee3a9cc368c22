/* SPDX-License-Identifier: MIT */
/* Description: an epoll registration of a swapped connection goes when its last fd closes (the number, reused by a new connection, registers afresh), a dup registers on its own, and a new epoll fd that reuses a closed one's number starts empty */
/* Channels: unix host-tcp shm shm-link */
#include "readiness_test.h"

static void case_close_drops(void)
{
	int ep = epoll_create1(EPOLL_CLOEXEC), a, b, a2, b2;
	char c;

	t_pair(AF_INET, &a, &b);
	CHECK(rt_ctl(ep, EPOLL_CTL_ADD, b, EPOLLIN, 1) == 0, "add");
	close(b);
	CHECK(send(a, "x", 1, MSG_NOSIGNAL) == 1 || errno == EPIPE, "write to the closed end");
	rt_expect_none(ep, RT_NONE_MS, "closed fd still reported");
	close(a);
	/* A new connection, very likely at the same numbers: registered afresh. */
	t_pair(AF_INET, &a2, &b2);
	CHECK(rt_ctl(ep, EPOLL_CTL_ADD, b2, EPOLLIN, 2) == 0, "add the new connection: %s",
	      strerror(errno));
	CHECK(write(a2, "y", 1) == 1, "write");
	rt_expect(ep, RT_SURE_MS, 2, EPOLLIN, 0, "the new connection");
	CHECK(read(b2, &c, 1) == 1 && c == 'y', "read");
	close(ep);
	close(a2);
	close(b2);
}

static void case_dup(void)
{
	int ep = epoll_create1(EPOLL_CLOEXEC), a, b, d;
	struct epoll_event ev[4];
	char c;

	t_pair(AF_INET, &a, &b);
	d = dup(b);
	CHECK(rt_ctl(ep, EPOLL_CTL_ADD, b, EPOLLIN, 3) == 0, "add");
	CHECK(rt_ctl(ep, EPOLL_CTL_ADD, d, EPOLLIN, 4) == 0, "add the dup");
	CHECK(write(a, "x", 1) == 1, "write");
	CHECK(epoll_wait(ep, ev, 4, RT_SURE_MS) == 2 && ev[0].data.u64 + ev[1].data.u64 == 7,
	      "both registrations");
	CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, b, NULL) == 0, "del the first");
	rt_expect(ep, RT_SURE_MS, 4, EPOLLIN, 0, "the dup alone");
	CHECK(read(d, &c, 1) == 1, "read from the dup");
	close(ep);
	close(a);
	close(b);
	close(d);
}

static void case_epoll_fd_reused(void)
{
	int ep = epoll_create1(EPOLL_CLOEXEC), ep2, a, b;
	char c;

	t_pair(AF_INET, &a, &b);
	CHECK(rt_ctl(ep, EPOLL_CTL_ADD, b, EPOLLIN, 5) == 0, "add");
	CHECK(write(a, "x", 1) == 1, "write");
	rt_expect(ep, RT_SURE_MS, 5, EPOLLIN, 0, "registered");
	close(ep);
	ep2 = epoll_create(8);
	CHECK(ep2 == ep, "the new epoll fd got another number (%d, not %d)", ep2, ep);
	rt_expect_none(ep2, RT_NONE_MS, "a new epoll fd reports the old one's registration");
	CHECK(read(b, &c, 1) == 1, "read");
	close(ep2);
	close(a);
	close(b);
}

int main(int argc, char **argv)
{
	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	case_close_drops();
	case_dup();
	case_epoll_fd_reused();
	CHECK(t_fast_await(4) == 4, "%d fast connections", t_fast_conns());
	return t_shim_finish();
}
