/* SPDX-License-Identifier: MIT */
/* Description: four shm connections parked on TCP (as for a migration) go back onto shared memory, both ends on one host, while each carries requests of 1-64 bytes after random pauses (0-1.5 ms) from a connector thread asleep in poll() in between, answered by an acceptor event loop (non-blocking, epoll): the TCP socket at each fd becomes the new channel's bell, the loop's epoll registrations move with it, no request goes unanswered, and every answer is its request's bytes plus one */
/* Channels: shm */
#include "shimtest.h"

#include <fcntl.h>

#define CONNS	4
#define RUN_MS	3000

static int server(int ctl)
{
	int lfd, fd[CONNS], ep = epoll_create1(0), open = CONNS;

	fd[0] = t_serve_one(ctl, &lfd);
	for (int i = 1; i < CONNS; i++) {
		fd[i] = accept(lfd, NULL, NULL);
		CHECK(fd[i] >= 0 && t_swapped(fd[i]), "connection %d is on shm", i);
	}
	for (int i = 0; i < CONNS; i++) {
		fcntl(fd[i], F_SETFL, O_NONBLOCK);
		CHECK(!epoll_ctl(ep, EPOLL_CTL_ADD, fd[i], &(struct epoll_event){ .events = EPOLLIN, .data.u32 = i }),
		      "epoll_ctl %d", i);
	}
	while (open > 0) {
		struct epoll_event ev;
		uint8_t b[64];
		ssize_t r;

		if (epoll_wait(ep, &ev, 1, 5000) != 1) {
			CHECK(0, "no request for 5 s");
			break;
		}
		r = read(fd[ev.data.u32], b, sizeof(b));
		if (r == 0) {
			close(fd[ev.data.u32]);
			open--;
			continue;
		}
		for (ssize_t k = 0; k < r; k++)
			b[k]++;
		CHECK(r < 0 ? errno == EAGAIN : write(fd[ev.data.u32], b, (size_t)r) == r, "answer on %u", ev.data.u32);
	}
	close(ep);
	close(lfd);
	return t_exit_code();
}

static void *requests(void *arg)
{
	int fd = (int)(intptr_t)arg, n = 0;
	unsigned seed = (unsigned)fd;
	int64_t end = t_ms() + RUN_MS;

	while (t_ms() < end) {
		uint8_t q[64], a[64];
		size_t len = 1 + rand_r(&seed) % sizeof(q), got = 0;

		usleep((useconds_t)(rand_r(&seed) % 1500));
		for (size_t k = 0; k < len; k++)
			q[k] = (uint8_t)(n + k);
		CHECK(write(fd, q, len) == (ssize_t)len, "request %d on fd %d", n, fd);
		while (got < len) {
			struct pollfd p = { fd, POLLIN, 0 };
			ssize_t r;

			if (poll(&p, 1, 2000) != 1 || (r = read(fd, a + got, len - got)) <= 0) {
				CHECK(0, "request %d on fd %d: %zu of %zu bytes answered in 2 s (%d ends on shm)", n, fd, got,
				      len, t_ledger_entries(FF_PATH_SHM, ""));
				return NULL;
			}
			got += (size_t)r;
		}
		for (size_t k = 0; k < len; k++)
			CHECK(a[k] == (uint8_t)(q[k] + 1), "request %d on fd %d: answer byte %zu", n, fd, k);
		n++;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t[CONNS];
	int ctl, fd[CONNS];
	uint16_t port;
	pid_t pid;

	(void)argc;
	setenv("FF_TEST_PARK_MS", "200", 1);
	setenv("FF_TEST_RESUME_MS", "400", 1);
	t_shim_setup(argv, FA_BROKER);
	port = t_fork_server(server, &ctl, &pid);
	for (int i = 0; i < CONNS; i++) {
		fd[i] = t_connect(AF_INET, port);
		CHECK(t_swapped(fd[i]), "connection %d is on shm", i);
		CHECK(!pthread_create(&t[i], NULL, requests, (void *)(intptr_t)fd[i]), "thread");
	}
	for (int i = 0; i < CONNS; i++)
		pthread_join(t[i], NULL);
	CHECK(t_agent_count("park") == 2 * CONNS, "%d ends parked, want %d", t_agent_count("park"), 2 * CONNS);
	CHECK(t_ledger_entries(FF_PATH_SHM, "") == 2 * CONNS, "%d ends back on shm, want %d (%d RESUMEs sent)",
	      t_ledger_entries(FF_PATH_SHM, ""), 2 * CONNS, t_agent_count("resume"));
	for (int i = 0; i < CONNS; i++) {
		CHECK(t_real_domain(fd[i]) == AF_UNIX, "fd %d is not the channel's bell", fd[i]);
		close(fd[i]);
	}
	t_wait_child(pid, "the acceptor");
	return t_exit_code();
}
