/* SPDX-License-Identifier: MIT */
/* Description: a pipe and a swapped connection in one poll, ppoll, select, pselect or epoll_wait call: a waiter asleep in it wakes for bytes on either, reports that one only, and with nothing ready returns 0 once its timeout passed (a finite one, and none: it wakes when bytes come) */
/* Channels: unix host-tcp shm shm-link */
#include "readiness_test.h"

static int pr, pw, a, b;

/* The fd that bytes arrive on next, and the one that stays quiet. */
struct turn {
	int write_to, ready, quiet;
	const char *name;
};

static struct turn turns[2];

static void consume(int fd)
{
	CHECK(rt_drain(fd) == 1, "one byte on %d", fd);
}

static void case_poll(int forever)
{
	for (int t = 0; t < 2; t++) {
		struct pollfd p[2] = { { .fd = pr, .events = POLLIN }, { .fd = b, .events = POLLIN } };
		struct rt_later l;
		int ready = turns[t].ready == pr ? 0 : 1, n;

		rt_write_later(&l, turns[t].write_to);
		n = poll(p, 2, forever ? -1 : RT_SURE_MS);
		CHECK(n == 1 && p[ready].revents == POLLIN && p[!ready].revents == 0,
		      "poll, %s: %d, revents %#x %#x", turns[t].name, n, p[0].revents, p[1].revents);
		rt_join(&l);
		consume(turns[t].ready);
	}
}

static void case_ppoll(void)
{
	sigset_t mask;

	sigemptyset(&mask);
	sigaddset(&mask, SIGUSR1);
	for (int t = 0; t < 2; t++) {
		struct pollfd p[2] = { { .fd = b, .events = POLLIN }, { .fd = pr, .events = POLLIN } };
		struct timespec ts = { .tv_sec = RT_SURE_MS / 1000 };
		struct rt_later l;
		int ready = turns[t].ready == b ? 0 : 1, n;

		rt_write_later(&l, turns[t].write_to);
		n = ppoll(p, 2, &ts, &mask);
		CHECK(n == 1 && p[ready].revents == POLLIN && p[!ready].revents == 0,
		      "ppoll, %s: %d, revents %#x %#x", turns[t].name, n, p[0].revents, p[1].revents);
		rt_join(&l);
		consume(turns[t].ready);
	}
}

static void case_select(int use_pselect)
{
	for (int t = 0; t < 2; t++) {
		struct timeval tv = { .tv_sec = RT_SURE_MS / 1000 };
		struct timespec ts = { .tv_sec = RT_SURE_MS / 1000 };
		int nfds = (pr > b ? pr : b) + 1, n;
		struct rt_later l;
		fd_set r;

		FD_ZERO(&r);
		FD_SET(pr, &r);
		FD_SET(b, &r);
		rt_write_later(&l, turns[t].write_to);
		n = use_pselect ? pselect(nfds, &r, NULL, NULL, &ts, NULL) :
				  select(nfds, &r, NULL, NULL, &tv);
		CHECK(n == 1 && FD_ISSET(turns[t].ready, &r) && !FD_ISSET(turns[t].quiet, &r),
		      "%s, %s: %d", use_pselect ? "pselect" : "select", turns[t].name, n);
		rt_join(&l);
		consume(turns[t].ready);
	}
}

static void case_epoll(int forever)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);

	CHECK(rt_ctl(ep, EPOLL_CTL_ADD, pr, EPOLLIN, 100) == 0, "add pipe");
	CHECK(rt_ctl(ep, EPOLL_CTL_ADD, b, EPOLLIN, 200) == 0, "add connection");
	for (int t = 0; t < 2; t++) {
		struct rt_later l;

		rt_write_later(&l, turns[t].write_to);
		rt_expect(ep, forever ? -1 : RT_SURE_MS, turns[t].ready == pr ? 100 : 200, EPOLLIN, 0,
			  turns[t].name);
		rt_join(&l);
		consume(turns[t].ready);
	}
	close(ep);
}

/* Nothing ready: 0, and not before the timeout (the upper bound only catches a hang). */
static void case_timeouts(void)
{
	struct pollfd p[2] = { { .fd = pr, .events = POLLIN }, { .fd = b, .events = POLLIN } };
	struct timespec ts = { .tv_nsec = 100 * 1000000 };
	struct timeval tv = { .tv_usec = 100 * 1000 };
	struct epoll_event ev[4];
	int ep = epoll_create1(EPOLL_CLOEXEC), n;
	int64_t t0;
	fd_set r;

	t0 = t_ms();
	n = poll(p, 2, 100);
	CHECK(n == 0 && t_ms() - t0 >= 100 && t_ms() - t0 < RT_SURE_MS, "poll: %d after %lld ms", n,
	      (long long)(t_ms() - t0));
	t0 = t_ms();
	n = ppoll(p, 2, &ts, NULL);
	CHECK(n == 0 && t_ms() - t0 >= 100 && t_ms() - t0 < RT_SURE_MS, "ppoll: %d after %lld ms",
	      n, (long long)(t_ms() - t0));
	FD_ZERO(&r);
	FD_SET(pr, &r);
	FD_SET(b, &r);
	t0 = t_ms();
	n = select((pr > b ? pr : b) + 1, &r, NULL, NULL, &tv);
	CHECK(n == 0 && t_ms() - t0 >= 100 && t_ms() - t0 < RT_SURE_MS, "select: %d after %lld ms",
	      n, (long long)(t_ms() - t0));
	CHECK(tv.tv_sec == 0 && tv.tv_usec == 0, "select left %ld.%06ld s", (long)tv.tv_sec,
	      (long)tv.tv_usec);
	rt_ctl(ep, EPOLL_CTL_ADD, pr, EPOLLIN, 1);
	rt_ctl(ep, EPOLL_CTL_ADD, b, EPOLLIN, 2);
	t0 = t_ms();
	n = epoll_wait(ep, ev, 4, 100);
	CHECK(n == 0 && t_ms() - t0 >= 100 && t_ms() - t0 < RT_SURE_MS,
	      "epoll_wait: %d after %lld ms", n, (long long)(t_ms() - t0));
	t0 = t_ms();
	n = epoll_pwait2(ep, ev, 4, &ts, NULL);
	CHECK(n == 0 && t_ms() - t0 >= 100 && t_ms() - t0 < RT_SURE_MS,
	      "epoll_pwait2: %d after %lld ms", n, (long long)(t_ms() - t0));
	t0 = t_ms();
	CHECK(poll(p, 2, 0) == 0 && epoll_wait(ep, ev, 4, 0) == 0, "zero timeouts");
	CHECK(t_ms() - t0 < RT_SURE_MS, "zero timeouts took %lld ms", (long long)(t_ms() - t0));
	close(ep);
}

int main(int argc, char **argv)
{
	int p[2];

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	t_pair(AF_INET, &a, &b);
	CHECK(t_swapped(b), "not swapped");
	CHECK(pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0, "pipe");
	pr = p[0];
	pw = p[1];
	turns[0] = (struct turn){ .write_to = pw, .ready = pr, .quiet = b, .name = "pipe" };
	turns[1] = (struct turn){ .write_to = a, .ready = b, .quiet = pr, .name = "connection" };
	case_poll(0);
	case_poll(1);
	case_ppoll();
	case_select(0);
	case_select(1);
	case_epoll(0);
	case_epoll(1);
	case_timeouts();
	close(a);
	close(b);
	CHECK(t_fast_await(1) == 1, "%d fast connections", t_fast_conns());
	return t_shim_finish();
}
