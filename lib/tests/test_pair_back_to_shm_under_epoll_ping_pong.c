/* SPDX-License-Identifier: MIT */
/* Description: two event loops (non-blocking sockets, epoll, level-triggered) ping-pong 64-byte requests and answers over a connection moved down to a socket pair by the acceptor's fork; once the fork child has exited, the connection moves back onto shared memory between two requests while both loops keep running: the program's epoll registrations become shm registrations (found in fdinfo), so the loops keep getting their events, and every answer is the right one for its request, none lost or repeated */
/* Channels: shm */
#include "shimtest.h"

#include <fcntl.h>
#include <sys/wait.h>

#define MSG	64
#define RUN_MS	3000

/* Read exactly MSG bytes from a non-blocking fd registered in ep: 0, or -1 (EOF, error, 5 s without one). */
static int read_msg(int ep, int fd, uint8_t *m)
{
	size_t got = 0;

	while (got < MSG) {
		struct epoll_event ev;
		ssize_t r = read(fd, m + got, MSG - got);

		if (r > 0) {
			got += (size_t)r;
			continue;
		}
		if (r == 0 || errno != EAGAIN || epoll_wait(ep, &ev, 1, 5000) != 1)
			return -1;
	}
	return 0;
}

static int server(int ctl)
{
	int lfd, fd = t_serve_one(ctl, &lfd), ep, st = -1, n = 0;
	uint8_t m[MSG];
	pid_t kid;

	kid = fork();
	if (kid == 0) {
		usleep(100000);
		_exit(0);
	}
	fcntl(fd, F_SETFL, O_NONBLOCK);
	ep = epoll_create1(0);
	CHECK(!epoll_ctl(ep, EPOLL_CTL_ADD, fd, &(struct epoll_event){ .events = EPOLLIN }),
	      "epoll_ctl on the socket pair");
	while (read_msg(ep, fd, m) == 0) {
		for (int i = 0; i < MSG; i++)
			m[i]++;
		CHECK(write(fd, m, MSG) == MSG, "answer %d", n);
		n++;
	}
	CHECK(n > 100, "only %d requests came", n);
	CHECK(waitpid(kid, &st, 0) == kid, "the child");
	close(ep);
	close(fd);
	close(lfd);
	return t_exit_code();
}

int main(int argc, char **argv)
{
	int ctl, fd, ep, n = 0, bad = 0, shm = 0;
	int64_t end;
	pid_t pid;

	(void)argc;
	setenv("FF_TEST_RESUME_MS", "200", 1);
	t_shim_setup(argv, FA_BROKER);
	fd = t_connect_forked(server, &ctl, &pid);
	fcntl(fd, F_SETFL, O_NONBLOCK);
	ep = epoll_create1(0);
	CHECK(!epoll_ctl(ep, EPOLL_CTL_ADD, fd, &(struct epoll_event){ .events = EPOLLIN }), "epoll_ctl");
	end = t_ms() + RUN_MS;
	while (t_ms() < end && !bad) {
		uint8_t q[MSG], a[MSG];

		for (int i = 0; i < MSG; i++)
			q[i] = (uint8_t)(n * 7 + i);
		if (write(fd, q, MSG) != MSG || read_msg(ep, fd, a)) {
			bad = 1;
			break;
		}
		for (int i = 0; i < MSG; i++)
			bad |= a[i] != (uint8_t)(q[i] + 1);
		n++;
		usleep(200);
		if (!shm && !(n % 100))
			shm = t_ledger_entries(FF_PATH_SHM, "") == 2;
	}
	CHECK(!bad, "request %d: no answer, or the wrong one", n);
	CHECK(shm, "%d requests in %d ms, and the connection never came back to shm (%d RESUMEs sent)", n,
	      RUN_MS, t_agent_count("resume"));
	close(fd);
	close(ep);
	t_wait_child(pid, "the acceptor");
	return t_exit_code();
}
