/* SPDX-License-Identifier: MIT */
/* Description: an acceptor whose client process exited lets go of every one of that link's channels once the next client's connection shows the link dead (they are dropped in the background, off the accept() that found it): none stays mapped; a child forked while they wait to be dropped maps none of them either */
/* Channels: shm-link */
#include "shimtest.h"

#define CONNS	6		/* open at once: a channel each */
#define N	(64u << 10)

static int first_client(uint16_t port)
{
	int fds[CONNS];

	/* The first through the agent, the rest over the link. */
	for (int i = 0; i < CONNS; i++) {
		fds[i] = t_connect(AF_INET, port);
		CHECK(t_swapped(fds[i]), "first client: connection %d not swapped", i);
	}
	for (int i = 0; i < CONNS; i++)
		t_exchange_nth(fds[i], i, N, 1);
	for (int i = 0; i < CONNS; i++)
		close(fds[i]);
	return t_exit_code();
}

static int next_client(uint16_t port)
{
	int fd = t_connect(AF_INET, port);

	t_exchange_nth(fd, CONNS, N, 1);
	close(fd);
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
	unsigned long inodes[64];
	int lfd, fds[CONNS], n = 0, left = 0, status;
	uint16_t port;
	pid_t pid, child;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen(AF_INET, &port);
	pid = fork();
	if (pid == 0)
		_exit(first_client(port));
	for (int i = 0; i < CONNS; i++) {
		fds[i] = accept(lfd, NULL, NULL);
		CHECK(fds[i] >= 0 && t_swapped(fds[i]), "connection %d not accepted swapped", i);
	}
	for (int i = 0; i < CONNS; i++)
		t_exchange_nth(fds[i], i, N, 0);
	for (int i = 0; i < CONNS; i++)
		close(fds[i]);
	t_wait_child(pid, "first client");
	t_note_link_channels(inodes, &n, 64);
	CHECK(n >= CONNS - 1, "%d link channels mapped for %d connections open at once", n, CONNS);

	/* Its link is found dead in this accept(): its channels go from here on. */
	pid = fork();
	if (pid == 0)
		_exit(next_client(port));
	fds[0] = accept(lfd, NULL, NULL);
	CHECK(fds[0] >= 0, "next client's connection not accepted: %s", strerror(errno));
	child = fork();
	if (child == 0)
		_exit(still_mapped(inodes, n) ? T_EXIT_FAIL : 0);
	CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "a child forked while the dead link's channels wait to be dropped maps some of them");
	t_exchange_nth(fds[0], CONNS, N, 0);
	close(fds[0]);
	t_wait_child(pid, "next client");
	for (int i = 0; i < 300 && (left = still_mapped(inodes, n)); i++)
		usleep(10000);
	CHECK(!left, "%d of the dead link's %d channels still mapped 3 s after it was found dead", left, n);
	close(lfd);
	return t_shim_finish();
}
