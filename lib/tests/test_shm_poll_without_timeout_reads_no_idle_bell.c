/* SPDX-License-Identifier: MIT */
/* Description: a progress loop that polls 16 shm connections with a zero timeout, as Open MPI's TCP transport does between messages, reads no bell socket the kernel does not report readable (it read each of them, a failed recv per connection per round, a third of the loop's system calls); a byte written on one is still reported at once, and a peer that closes, or is killed (only its bell socket's end says so), is still seen as hung up */
/* Channels: shm */
#include "readiness_test.h"

#define CONNS	16
#define ROUNDS	200

/* A peer in a child that is killed: no flag in the rings says so, only its bell socket's end. */
static void killed_peer_seen(void)
{
	uint16_t port;
	int lfd = t_listen(AF_INET, &port), fd, n = 0;
	struct pollfd p;
	pid_t pid = fork();

	if (pid == 0) {
		int c = t_connect(AF_INET, port);

		(void)!write(c, "k", 1);
		pause();
		_exit(0);
	}
	fd = accept(lfd, NULL, NULL);
	CHECK(fd >= 0 && t_swapped(fd), "the killed peer's connection not on shm");
	p = (struct pollfd){ .fd = fd, .events = POLLIN };
	CHECK(poll(&p, 1, 5000) == 1 && read(fd, &(char){ 0 }, 1) == 1, "the peer's byte");
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	/* Zero-timeout polls only, as a progress loop makes them. */
	for (int64_t end = t_ms() + 5000; !n && t_ms() < end; usleep(1000))
		n = poll(&p, 1, 0);
	CHECK(n == 1 && (p.revents & (POLLHUP | POLLIN)),
	      "a killed peer not seen by zero-timeout polls in 5 s (revents %#x)", p.revents);
	close(fd);
	close(lfd);
}

int main(int argc, char **argv)
{
	int a[CONNS], b[CONNS];
	struct pollfd p[CONNS];
	unsigned before = 0, after = 0;
	_Atomic unsigned *recvs;
	char c;

	(void)argc;
	recvs = t_setup_counting_recvs(argv);
	if (!recvs)
		return t_shim_finish();
	for (int i = 0; i < CONNS; i++) {
		t_pair(AF_INET, &a[i], &b[i]);
		CHECK(t_swapped(b[i]) && b[i] < 1024, "connection %d: not on shm", i);
		p[i] = (struct pollfd){ .fd = b[i], .events = POLLIN };
	}
	for (int i = 0; i < CONNS; i++)
		before += recvs[b[i]];
	for (int r = 0; r < ROUNDS; r++)
		CHECK(poll(p, CONNS, 0) == 0, "round %d: an idle connection reported", r);
	for (int i = 0; i < CONNS; i++)
		after += recvs[b[i]];
	CHECK(after == before, "%d zero-timeout polls of %d idle connections read their bells %u times",
	      ROUNDS, CONNS, after - before);
	/* Still reported: a byte, then the peer's close. */
	CHECK(write(a[5], "x", 1) == 1, "write");
	CHECK(poll(p, CONNS, 0) == 1 && p[5].revents == POLLIN, "the byte on connection 5 not reported");
	CHECK(read(b[5], &c, 1) == 1 && c == 'x', "the byte on connection 5");
	close(a[9]);
	CHECK(poll(p, CONNS, 0) == 1 && (p[9].revents & (POLLIN | POLLHUP)),
	      "the close of connection 9's peer not reported (revents %#x)", p[9].revents);
	for (int i = 0; i < CONNS; i++) {
		if (i != 9)
			close(a[i]);
		close(b[i]);
	}
	killed_peer_seen();
	CHECK(t_fast_await(CONNS + 1) == CONNS + 1, "%d fast connections", t_fast_conns());
	return t_shim_finish();
}
