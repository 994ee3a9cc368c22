/* SPDX-License-Identifier: MIT */
/* Description: an acceptor whose client process exited finds that link dead in accept() of the next client's connection and lets go of every one of its channels in the background, not in that accept(): right after it they are still mapped, a few seconds later none is; a child forked while they wait maps no channel at all when fork() returns, neither theirs nor the live link's */
/* Channels: shm-link */
#include "shimtest.h"

#define CONNS	6		/* open at once: a channel each */
#define N	(64u << 10)

/*
 * Forked by the first client before it connects: when the acceptor says
 * so on ctl, two connections, the second over the new link.
 */
static int next_client(uint16_t port, int ctl)
{
	char c = 0;
	int fd[2];

	CHECK(read(ctl, &c, 1) == 1 && c == 'n', "the acceptor never said connect");
	for (int i = 0; i < 2; i++) {
		fd[i] = t_connect(AF_INET, port);
		CHECK(t_swapped(fd[i]), "next client: connection %d not swapped", i);
	}
	for (int i = 0; i < 2; i++) {
		t_exchange_nth(fd[i], CONNS + i, N, 1);
		close(fd[i]);
	}
	c = t_exit_code() ? 'f' : 'k';
	CHECK(write(ctl, &c, 1) == 1, "report to the acceptor");
	return t_exit_code();
}

static int first_client(uint16_t port, int ctl)
{
	static uint8_t burst[T_BURST];
	int fds[CONNS];

	if (fork() == 0)
		_exit(next_client(port, ctl));
	/* The first through the agent, the rest over the link. */
	for (int i = 0; i < CONNS; i++) {
		fds[i] = t_connect(AF_INET, port);
		CHECK(t_swapped(fds[i]), "first client: connection %d not swapped", i);
	}
	/*
	 * Bursts past 256 KiB on the agent's channel and on a link's: the
	 * acceptor's spill thread gives the first back at its first look (the
	 * channel is gone when closed), then waits a second for the other.
	 */
	memset(burst, 0xab, sizeof(burst));
	for (int i = 0; i < 2; i++)
		CHECK(send(fds[i], burst, T_BURST, MSG_DONTWAIT) == (ssize_t)T_BURST, "burst %d not taken at once", i);
	CHECK(write(ctl, "s", 1) == 1, "say sent");
	for (int i = 2; i < CONNS; i++)
		t_exchange_nth(fds[i], i, N, 1);
	for (int i = 0; i < CONNS; i++)
		close(fds[i]);
	return t_exit_code();
}

/* How many of the channels in inodes[n] this process maps. */
static int still_mapped(const unsigned long *inodes, int n)
{
	unsigned long now[64];
	int k = 0, left = 0;

	t_note_link_channels(now, &k, 64);
	for (int i = 0; i < n; i++)
		for (int j = 0; j < k; j++)
			left += now[j] == inodes[i];
	return left;
}

int main(int argc, char **argv)
{
	static uint8_t in[T_BURST];
	unsigned long inodes[64];
	int lfd, ctl, fds[CONNS], n = 0, left, status;
	pid_t pid, child;
	char c = 0;

	(void)argc;
	pid = t_link_test_start(argv, first_client, &lfd, &ctl);
	for (int i = 0; i < CONNS; i++) {
		fds[i] = accept(lfd, NULL, NULL);
		CHECK(fds[i] >= 0 && t_swapped(fds[i]), "connection %d not accepted swapped", i);
	}
	CHECK(read(ctl, &c, 1) == 1 && c == 's', "the first client never said sent");
	for (int i = 0; i < 2; i++)
		CHECK(recv(fds[i], in, T_BURST, MSG_WAITALL) == (ssize_t)T_BURST, "burst %d lost", i);
	for (int i = 2; i < CONNS; i++)
		t_exchange_nth(fds[i], i, N, 0);
	for (int i = 0; i < CONNS; i++)
		close(fds[i]);
	t_wait_child(pid, "first client");
	t_note_link_channels(inodes, &n, 64);
	CHECK(n >= CONNS - 1, "%d link channels mapped for %d connections open at once", n, CONNS);
	/* The agent's channel going is the spill thread's first look: its next is a second away. */
	for (int i = 0; i < 300 && t_maps_named(0, "/memfd:ff-shm", NULL) > 0; i++)
		usleep(10000);
	CHECK(t_maps_named(0, "/memfd:ff-shm", NULL) == 0, "the agent's channel, closed, still mapped after 3 s");

	/* The first client's link is found dead in the first accept(). */
	CHECK(write(ctl, "n", 1) == 1, "tell the next client to connect");
	for (int i = 0; i < 2; i++) {
		fds[i] = accept(lfd, NULL, NULL);
		CHECK(fds[i] >= 0 && t_swapped(fds[i]), "the next client's connection %d not accepted swapped", i);
	}
	CHECK(still_mapped(inodes, n) == n, "only %d of the dead link's %d channels still mapped right after "
	      "the accept() that found it dead: it unmapped them itself", still_mapped(inodes, n), n);
	/* Its channels, and the live link's, all gone in the child when fork() returns. */
	child = fork();
	if (child == 0)
		_exit(t_shm_maps() ? T_EXIT_FAIL : 0);
	CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "a child forked while a dead link's channels wait to be dropped still maps channels");
	for (int i = 0; i < 2; i++) {
		t_exchange_nth(fds[i], CONNS + i, N, 0);
		close(fds[i]);
	}
	CHECK(read(ctl, &c, 1) == 1 && c == 'k', "the next client failed");
	for (int i = 0; i < 300 && (left = still_mapped(inodes, n)); i++)
		usleep(10000);
	CHECK(!left, "%d of the dead link's %d channels still mapped 3 s after it was found dead", left, n);
	close(lfd);
	return t_shim_finish();
}
