/* SPDX-License-Identifier: MIT */
/* Description: a thread asleep in epoll_wait wakes when another thread adds a swapped connection with bytes waiting (to a set with only a pipe, and to a set already waiting on another connection) or re-arms an EPOLLONESHOT one with EPOLL_CTL_MOD; with maxevents 1 and many ready, every connection and the pipe get their turn (none starves) */
/* Channels: unix host-tcp shm shm-link */
#include "readiness_test.h"

#define FAIR_ROUNDS	1000

struct waiter {
	int ep, n;
	struct epoll_event ev[4];
	pthread_t th;
};

static void *wait_fn(void *p)
{
	struct waiter *w = p;

	w->n = epoll_wait(w->ep, w->ev, 4, RT_SURE_MS);
	return NULL;
}

/* Start a thread in epoll_wait on ep, and give it time to fall asleep. */
static void start_waiter(struct waiter *w, int ep)
{
	w->ep = ep;
	pthread_create(&w->th, NULL, wait_fn, w);
	usleep(RT_LATER_MS * 1000);
}

static void expect_woken(struct waiter *w, uint64_t data, const char *how)
{
	pthread_join(w->th, NULL);
	CHECK(w->n == 1 && w->ev[0].data.u64 == data && (w->ev[0].events & EPOLLIN),
	      "%s: epoll_wait gave %d, data %llu", how, w->n,
	      w->n > 0 ? (unsigned long long)w->ev[0].data.u64 : 0);
}

/*
 * A waiter asleep on a set armed for other only (as other_data); b is
 * added (as data) with a byte already there, and must wake it.
 */
static void added_while_waiting(int a, int b, int other, uint64_t other_data, uint64_t data,
				const char *how)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct waiter w;
	char c;

	CHECK(rt_ctl(ep, EPOLL_CTL_ADD, other, EPOLLIN, other_data) == 0, "%s: add the first", how);
	CHECK(write(a, "x", 1) == 1, "%s: write", how);
	start_waiter(&w, ep);
	CHECK(rt_ctl(ep, EPOLL_CTL_ADD, b, EPOLLIN, data) == 0, "%s: add connection", how);
	expect_woken(&w, data, how);
	CHECK(read(b, &c, 1) == 1, "%s: read", how);
	close(ep);
}

/* The set has only a pipe: the waiter sleeps in libc's epoll_wait when the connection comes. */
static void case_added_to_plain_set(int a, int b, int pr)
{
	added_while_waiting(a, b, pr, 1, 2, "added to a set of a pipe");
}

/* The waiter is asleep armed for c; b is added with bytes already there. */
static void case_added_to_waiting_set(int a, int b, int c)
{
	added_while_waiting(a, b, c, 3, 4, "added to a waiting set");
}

static void case_oneshot_rearmed(int a, int b)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct waiter w;
	char c;

	CHECK(rt_ctl(ep, EPOLL_CTL_ADD, b, EPOLLIN | EPOLLONESHOT, 5) == 0, "add");
	CHECK(write(a, "x", 1) == 1, "write");
	rt_expect(ep, RT_SURE_MS, 5, EPOLLIN, 0, "oneshot");
	/* Off now, bytes unread: the waiter sleeps until the MOD. */
	start_waiter(&w, ep);
	CHECK(rt_ctl(ep, EPOLL_CTL_MOD, b, EPOLLIN | EPOLLONESHOT, 6) == 0, "re-arm");
	expect_woken(&w, 6, "re-armed by another thread");
	CHECK(read(b, &c, 1) == 1, "read");
	close(ep);
}

/* Three connections and a pipe, all readable, level-triggered; maxevents 1. */
static void case_fair(int (*pairs)[2], int pr, int pw)
{
	int ep = epoll_create1(EPOLL_CLOEXEC), seen[4] = { 0 };
	struct epoll_event ev;

	CHECK(write(pw, "p", 1) == 1, "write pipe");
	CHECK(rt_ctl(ep, EPOLL_CTL_ADD, pr, EPOLLIN, 3) == 0, "add pipe");
	for (int i = 0; i < 3; i++) {
		CHECK(write(pairs[i][0], "x", 1) == 1, "write %d", i);
		CHECK(rt_ctl(ep, EPOLL_CTL_ADD, pairs[i][1], EPOLLIN, (uint64_t)i) == 0, "add %d", i);
	}
	/* Ordinary fds may wait a few microseconds behind busy shm ones (epoll_wait.c). */
	for (int i = 0; i < FAIR_ROUNDS && !(seen[0] && seen[1] && seen[2] && seen[3]); i++) {
		int n = epoll_wait(ep, &ev, 1, RT_SURE_MS);

		CHECK(n == 1 && ev.data.u64 < 4, "round %d: %d", i, n);
		if (n == 1 && ev.data.u64 < 4)
			seen[ev.data.u64]++;
	}
	for (int i = 0; i < 4; i++)
		CHECK(seen[i] > 0, "%s %d never reported in %d rounds (%d %d %d %d)",
		      i == 3 ? "the pipe" : "connection", i, FAIR_ROUNDS, seen[0], seen[1], seen[2],
		      seen[3]);
	for (int i = 0; i < 3; i++)
		rt_drain(pairs[i][1]);
	rt_drain(pr);
	close(ep);
}

int main(int argc, char **argv)
{
	int pairs[3][2], p[2];

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	for (int i = 0; i < 3; i++) {
		t_pair(AF_INET, &pairs[i][0], &pairs[i][1]);
		CHECK(t_swapped(pairs[i][1]), "pair %d not swapped", i);
	}
	CHECK(pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0, "pipe");
	case_added_to_plain_set(pairs[0][0], pairs[0][1], p[0]);
	case_added_to_waiting_set(pairs[0][0], pairs[0][1], pairs[1][1]);
	case_oneshot_rearmed(pairs[0][0], pairs[0][1]);
	case_fair(pairs, p[0], p[1]);
	for (int i = 0; i < 3; i++) {
		close(pairs[i][0]);
		close(pairs[i][1]);
	}
	CHECK(t_fast_await(3) == 3, "%d fast connections", t_fast_conns());
	return t_shim_finish();
}
