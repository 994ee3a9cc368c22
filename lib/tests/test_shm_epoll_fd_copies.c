/* SPDX-License-Identifier: MIT */
/* Description: copies of an epoll fd are one epoll set, as in the kernel: a registration made through a copy (F_DUPFD_CLOEXEC, dup, dup3; mio/tokio register through one) is reported by an epoll_wait on the original, asleep or not, and the other way round; it outlives closing the number it was made through; a number dup2'ed over with another epoll fd or reused by epoll_create leads to that set only */
/* Channels: unix shm shm-link */
#include "readiness_test.h"

/* A registration of b made through reg, reported by a sleeper on wait once a writes. */
static void case_through(int a, int b, int reg, int wait, uint64_t data, const char *how)
{
	struct rt_later l;

	CHECK(rt_ctl(reg, EPOLL_CTL_ADD, b, EPOLLIN | EPOLLET, data) == 0, "%s: add: %s", how,
	      strerror(errno));
	rt_expect_none(wait, RT_NONE_MS, how);
	rt_write_later(&l, a);
	rt_expect(wait, RT_SURE_MS, data, EPOLLIN, 0, how);
	rt_join(&l);
	CHECK(rt_drain(b) == 1, "%s: the byte", how);
}

static void case_copies(int a, int b)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	int copy = fcntl(ep, F_DUPFD_CLOEXEC, 0), copy2 = dup(ep);

	case_through(a, b, copy, ep, 1, "added through F_DUPFD_CLOEXEC, waited on the original");
	CHECK(rt_ctl(ep, EPOLL_CTL_DEL, b, 0, 0) == 0, "delete through the original: %s",
	      strerror(errno));
	case_through(a, b, ep, copy2, 2, "added through the original, waited on a dup");
	/* The set lives while any copy does. */
	close(ep);
	CHECK(write(a, "x", 1) == 1, "write");
	rt_expect(copy, RT_SURE_MS, 2, EPOLLIN, 0, "the original closed, a copy waits");
	CHECK(rt_drain(b) == 1, "the byte");
	close(copy);
	close(copy2);
}

static void case_renamed(int a, int b)
{
	int ep = epoll_create1(EPOLL_CLOEXEC), other = epoll_create1(EPOLL_CLOEXEC);
	int copy = dup(ep), num;

	CHECK(rt_ctl(copy, EPOLL_CTL_ADD, b, EPOLLIN, 3) == 0, "add: %s", strerror(errno));
	/* copy now names the other set: what ep holds is not reported there. */
	CHECK(dup3(other, copy, O_CLOEXEC) == copy, "dup3: %s", strerror(errno));
	CHECK(write(a, "x", 1) == 1, "write");
	rt_expect_none(copy, RT_NONE_MS, "dup3'ed over with another epoll fd");
	rt_expect(ep, RT_SURE_MS, 3, EPOLLIN, 0, "the original still has it");
	CHECK(rt_drain(b) == 1, "the byte");
	/* A new epoll fd at a closed copy's number starts empty; the original keeps it. */
	close(copy);
	num = epoll_create1(EPOLL_CLOEXEC);
	CHECK(write(a, "y", 1) == 1, "write");
	rt_expect_none(num, RT_NONE_MS, "a new epoll fd at a copy's old number");
	rt_expect(ep, RT_SURE_MS, 3, EPOLLIN, 0, "the original, after its copy's number was reused");
	CHECK(rt_drain(b) == 1, "the byte");
	close(num);
	close(other);
	close(ep);
}

int main(int argc, char **argv)
{
	int a, b;

	(void)argc;
	t_setup_swapped_pair(argv, &a, &b);
	case_copies(a, b);
	case_renamed(a, b);
	close(a);
	close(b);
	CHECK(t_fast_await(1) == 1, "%d fast connections", t_fast_conns());
	return t_shim_finish();
}
