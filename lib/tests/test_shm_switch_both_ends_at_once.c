/* SPDX-License-Identifier: MIT */
/* Description: both ends of an shm connection move down at the same moment (both processes fork at once, with bytes unread in both directions), over many connections: one wins switch_by, the other adopts, and every byte arrives once and in order both ways */
/* Channels: shm shm-link */
#include <stdatomic.h>
#include <sys/mman.h>

#include "shimtest.h"

#define ROUNDS	40
#define SENT0	(240u << 10)
#define READ0	(4u << 10)
#define TOTAL	(512u << 10)

/* Both processes arrive, then both go on at once (spinning: no wake-up latency). */
static void barrier(_Atomic int *arrived, int round)
{
	atomic_fetch_add(arrived, 1);
	while (atomic_load(arrived) < 2 * (round + 1))
		;
}

/* One end's round on fd: returns 0 if its stream went through intact both ways. */
static int one_end(int fd, uint8_t out, uint8_t in, _Atomic int *arrived, int round)
{
	pid_t pid;
	int st;

	if (t_send_stream_from(fd, 0, SENT0, out) || t_recv_stream_from(fd, 0, READ0, in))
		return 1;
	barrier(arrived, round);
	pid = fork();		/* moves the connection down first */
	if (pid == 0)
		_exit(0);
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return 2;
	return t_duplex(fd, SENT0, out, READ0, in, TOTAL) ? 3 : 0;
}

static int peer(int lfd, _Atomic int *arrived)
{
	for (int i = 0; i < ROUNDS; i++) {
		int fd = accept(lfd, NULL, NULL), r;

		if (fd < 0 || !t_swapped(fd))
			return 10;
		r = one_end(fd, 2, 1, arrived, i);
		close(fd);
		if (r)
			return r;
	}
	return 0;
}

int main(int argc, char **argv)
{
	_Atomic int *arrived;
	uint16_t port;
	int lfd, bad = 0;
	pid_t pid;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	arrived = mmap(NULL, sizeof(*arrived), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		       -1, 0);
	if (arrived == MAP_FAILED)
		return T_EXIT_FAIL;
	lfd = t_listen(AF_INET, &port);
	pid = fork();
	if (pid == 0)
		_exit(peer(lfd, arrived));
	for (int i = 0; i < ROUNDS && !bad; i++) {
		int fd = t_connect(AF_INET, port);
		ino_t bell = t_ino(fd);

		CHECK(t_swapped(fd), "round %d: not on shm", i);
		bad = one_end(fd, 1, 2, arrived, i);
		CHECK(!bad, "round %d: failed at step %d (1 before, 2 fork, 3 stream after)", i, bad);
		CHECK(t_moved_down(fd, bell), "round %d: not moved down", i);
		close(fd);
	}
	if (bad)
		kill(pid, SIGKILL);
	t_wait_child(pid, "peer (status: 10 not shm, 1-3 as for this end)");
	close(lfd);
	return t_shim_finish();
}
