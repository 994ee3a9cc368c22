/* SPDX-License-Identifier: MIT */
/* Description: a shared-memory connection moved down to a socket pair by fork: both ends then write a whole 4 MiB message (net.core.wmem_max, if less) before they read, as they could on the shm channel before the move: no deadlock, every byte intact */
/* Channels: shm shm-link */
#include <sys/wait.h>

#include "shimtest.h"

/*
 * Per direction: what the shm test writes (test_shm_both_ends_write_whole_
 * before_reading), below what a ring lets in unread, so below what the pair
 * the library moves down to can hold (twice net.core.wmem_max, docs/SHM.md).
 */
static unsigned int N = 4u << 20;
#define DEADLINE_S	20

struct end {
	int fd;
	uint8_t out, in;	/* stream seeds */
};

/* Blocking: the whole message out, then the peer's in. */
static void *write_then_read(void *p)
{
	struct end *e = p;

	if (t_send_stream(e->fd, N, e->out) || t_recv_stream(e->fd, N, e->in))
		return p;
	return NULL;
}

int main(int argc, char **argv)
{
	struct end c = { .out = 1, .in = 2 }, s = { .out = 2, .in = 1 };
	void *rc = &c, *rs = &s;
	struct timespec dl;
	pthread_t tc, ts;
	ino_t bell;
	pid_t pid;

	(void)argc;
	N = t_sysctl_at_most("/proc/sys/net/core/wmem_max", N);
	t_setup_swapped_pair(argv, &c.fd, &s.fd);
	bell = t_ino(c.fd);
	pid = fork();
	if (pid == 0)
		_exit(0);
	t_wait_child(pid, "child");
	CHECK(t_moved_down(c.fd, bell), "the connection did not move down at fork");
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += DEADLINE_S;
	pthread_create(&tc, NULL, write_then_read, &c);
	pthread_create(&ts, NULL, write_then_read, &s);
	if (pthread_timedjoin_np(tc, &rc, &dl) || pthread_timedjoin_np(ts, &rs, &dl)) {
		fprintf(stderr, "hang: both ends of the moved-down pair wrote %u bytes before reading "
			"and are still blocked after %d s (SO_SNDBUF %d and %d)\n", N, DEADLINE_S,
			t_real_sockopt(c.fd, SOL_SOCKET, SO_SNDBUF),
			t_real_sockopt(s.fd, SOL_SOCKET, SO_SNDBUF));
		exit(T_EXIT_FAIL);
	}
	CHECK(rc == NULL && rs == NULL, "not intact (client %s, server %s)",
	      rc ? "failed" : "ok", rs ? "failed" : "ok");
	close(c.fd);
	close(s.fd);
	return t_shim_finish();
}
