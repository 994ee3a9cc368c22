/* SPDX-License-Identifier: MIT */
/* Description: a process forks while a ring of its shared-memory connection is written full and unread (both ends here, so the reader of what moves down is the forking process itself): the move down never waits for a reader, the connection survives, and every byte arrives intact */
/* Channels: shm shm-link */
#include <fcntl.h>
#include <sys/wait.h>

#include "shimtest.h"

/* Writes the test stream into fd until it would block: how many bytes. */
static size_t fill(int fd, uint8_t seed)
{
	uint8_t buf[16384];
	size_t off = 0;

	for (;;) {
		ssize_t w;

		for (size_t i = 0; i < sizeof(buf); i++)
			buf[i] = t_byte(off + i, seed);
		w = write(fd, buf, sizeof(buf));
		if (w <= 0)
			return off;
		off += (size_t)w;
	}
}

int main(int argc, char **argv)
{
	int cfd, sfd, st = -1;
	int64_t t0, took;
	size_t n;
	pid_t pid;

	(void)argc;
	t_setup_swapped_pair(argv, &cfd, &sfd);
	CHECK(fcntl(cfd, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
	n = fill(cfd, 7);
	CHECK(n > 0, "nothing written");
	t0 = t_ms();
	pid = fork();
	if (pid == 0)
		_exit(0);
	took = t_ms() - t0;
	CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st), "fork");
	/* A move that waited for a reader would wait 5 s, then fail the connection. */
	CHECK(took < 4000, "fork took %lld ms with %zu bytes unread", (long long)took, n);
	CHECK(fcntl(cfd, F_SETFL, 0) == 0, "blocking again");
	CHECK(t_recv_stream(sfd, n, 7) == 0, "%zu bytes unread at the fork: not all intact", n);
	CHECK(write(cfd, "x", 1) == 1, "the connection is gone after the fork: %s", strerror(errno));
	printf("%zu bytes unread at the fork moved down in %lld ms\n", n, (long long)took);
	close(cfd);
	close(sfd);
	return t_shim_finish();
}
