/* SPDX-License-Identifier: MIT */
/* Description: epoll on a swapped connection as on TCP: level-triggered reports while bytes are unread, edge-triggered once per arrival (none without new bytes, a new one per write), EPOLLONESHOT once until EPOLL_CTL_MOD re-arms it, MOD changes the events, DEL stops reports; events and data as registered */
/* Channels: unix host-tcp shm shm-link */
#include "readiness_test.h"

static void case_level(int a, int b)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	char buf[4];

	CHECK(rt_ctl(ep, EPOLL_CTL_ADD, b, EPOLLIN, 11) == 0, "add: %s", strerror(errno));
	rt_expect_none(ep, 0, "level, nothing written");
	CHECK(write(a, "x", 1) == 1, "write");
	rt_expect(ep, RT_SURE_MS, 11, EPOLLIN, EPOLLOUT, "level");
	rt_expect(ep, 0, 11, EPOLLIN, 0, "level, unread: again");
	rt_expect(ep, 0, 11, EPOLLIN, 0, "level, unread: and again");
	CHECK(read(b, buf, sizeof(buf)) == 1, "read");
	rt_expect_none(ep, RT_NONE_MS, "level, all read");
	close(ep);
}

/*
 * A set armed for b with events (as data), and a byte from a: reported
 * once, and not again while nothing more comes (quiet); then a second byte
 * comes. Returns the set.
 */
static int reported_once(int a, int b, uint32_t events, uint64_t data, const char *what,
			 const char *quiet)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);

	CHECK(rt_ctl(ep, EPOLL_CTL_ADD, b, events, data) == 0, "add");
	CHECK(write(a, "x", 1) == 1, "write");
	rt_expect(ep, RT_SURE_MS, data, EPOLLIN, 0, what);
	rt_expect_none(ep, RT_NONE_MS, quiet);
	CHECK(write(a, "y", 1) == 1, "write again");
	return ep;
}

static void case_edge(int a, int b)
{
	int ep = reported_once(a, b, EPOLLIN | EPOLLET, 22, "edge", "edge, no new bytes");
	char buf[4];

	rt_expect(ep, RT_SURE_MS, 22, EPOLLIN, 0, "edge, a new write, first still unread");
	rt_expect_none(ep, RT_NONE_MS, "edge, no new bytes again");
	CHECK(recv(b, buf, 2, MSG_WAITALL) == 2, "read both");
	rt_expect_none(ep, RT_NONE_MS, "edge, all read");
	close(ep);
}

/* IN|OUT edge-triggered, as nginx registers: writable once at ADD, readable per arrival. */
static void case_edge_in_out(int a, int b)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	char buf[4];

	CHECK(rt_ctl(ep, EPOLL_CTL_ADD, b, EPOLLIN | EPOLLOUT | EPOLLET, 23) == 0, "add");
	rt_expect(ep, RT_SURE_MS, 23, EPOLLOUT, EPOLLIN, "edge in|out, writable at ADD");
	rt_expect_none(ep, RT_NONE_MS, "edge in|out, nothing new");
	CHECK(write(a, "x", 1) == 1, "write");
	rt_expect(ep, RT_SURE_MS, 23, EPOLLIN, 0, "edge in|out, readable");
	CHECK(read(b, buf, sizeof(buf)) == 1, "read");
	close(ep);
}

static void case_oneshot(int a, int b)
{
	int ep = reported_once(a, b, EPOLLIN | EPOLLONESHOT, 33, "oneshot", "oneshot, unread");
	char buf[4];

	rt_expect_none(ep, RT_NONE_MS, "oneshot, new bytes before MOD");
	CHECK(rt_ctl(ep, EPOLL_CTL_MOD, b, EPOLLIN | EPOLLONESHOT, 34) == 0, "re-arm");
	rt_expect(ep, RT_SURE_MS, 34, EPOLLIN, 0, "oneshot re-armed, new data word");
	rt_expect_none(ep, RT_NONE_MS, "oneshot re-armed, once");
	CHECK(recv(b, buf, 2, MSG_WAITALL) == 2, "read both");
	close(ep);
}

static void case_mod_del(int a, int b)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = { .events = EPOLLIN };
	char buf[4];

	CHECK(rt_ctl(ep, EPOLL_CTL_ADD, b, EPOLLOUT, 44) == 0, "add");
	rt_expect(ep, RT_SURE_MS, 44, EPOLLOUT, EPOLLIN, "out only");
	CHECK(rt_ctl(ep, EPOLL_CTL_ADD, b, EPOLLIN, 45) == -1 && errno == EEXIST, "second ADD");
	CHECK(rt_ctl(ep, EPOLL_CTL_MOD, b, EPOLLIN, 46) == 0, "mod to in");
	rt_expect_none(ep, RT_NONE_MS, "in only, nothing written");
	CHECK(write(a, "x", 1) == 1, "write");
	rt_expect(ep, RT_SURE_MS, 46, EPOLLIN, EPOLLOUT, "in only, written");
	CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, b, NULL) == 0, "del: %s", strerror(errno));
	rt_expect_none(ep, RT_NONE_MS, "deleted");
	CHECK(epoll_ctl(ep, EPOLL_CTL_DEL, b, NULL) == -1 && errno == ENOENT, "second DEL");
	CHECK(epoll_ctl(ep, EPOLL_CTL_MOD, b, &ev) == -1 && errno == ENOENT, "MOD after DEL");
	CHECK(rt_ctl(ep, EPOLL_CTL_ADD, b, EPOLLIN | EPOLLEXCLUSIVE | EPOLLRDHUP, 47) == -1 &&
	      errno == EINVAL, "EXCLUSIVE with RDHUP");
	CHECK(rt_ctl(ep, EPOLL_CTL_ADD, b, EPOLLIN | EPOLLEXCLUSIVE, 48) == 0, "add exclusive");
	CHECK(rt_ctl(ep, EPOLL_CTL_MOD, b, EPOLLIN, 49) == -1 && errno == EINVAL, "MOD of exclusive");
	rt_expect(ep, RT_SURE_MS, 48, EPOLLIN, 0, "exclusive");
	CHECK(read(b, buf, sizeof(buf)) == 1, "read");
	close(ep);
}

int main(int argc, char **argv)
{
	int a, b;

	(void)argc;
	t_setup_swapped_pair(argv, &a, &b);
	case_level(a, b);
	case_edge(a, b);
	case_edge_in_out(a, b);
	case_oneshot(a, b);
	case_mod_del(a, b);
	close(a);
	close(b);
	CHECK(t_fast_await(1) == 1, "%d fast connections", t_fast_conns());
	return t_shim_finish();
}
