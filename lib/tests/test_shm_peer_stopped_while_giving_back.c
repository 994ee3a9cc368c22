/* SPDX-License-Identifier: MIT */
/* Description: a peer stopped (SIGSTOP, cgroup freezer) for longer than a second while its thread gives a ring's pages back (spill word FREEING, bytes unread) does not get a healthy connection reset: the blocked writer waits, without a core spinning, and once the peer goes on every byte arrives intact */
/* Channels: shm shm-link */
#include "shimtest.h"

#define FIRST		(128u << 10)	/* unread when the peer stops */
#define N		(FF_SHM_KEEP + (64u << 10))
#define STOPPED_MS	1500		/* past the 1 s after which the writer used to reset */

struct writer {
	int fd;
	int ret;
};

static void *write_rest(void *arg)
{
	struct writer *w = arg;

	w->ret = t_send_stream_from(w->fd, FIRST, N, 1);
	return NULL;
}

static void case_stopped(int cfd, int sfd, uint8_t *m)
{
	struct writer w = { cfd, -1 };
	struct timespec stop = { STOPPED_MS / 1000, STOPPED_MS % 1000 * 1000000L };
	struct timeval limit = { 10, 0 };	/* a reset writer sends nothing more: fail, not hang */
	pthread_t t;

	CHECK(!setsockopt(sfd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit)), "SO_RCVTIMEO");
	CHECK(t_send_stream_from(cfd, 0, FIRST, 1) == 0, "first bytes");
	/* The peer's thread took the word, then the peer was stopped: the ring is not empty. */
	__atomic_store_n((uint32_t *)(void *)(m + T_SPILL0), FF_SPILL_FREEING, __ATOMIC_SEQ_CST);
	CHECK(!pthread_create(&t, NULL, write_rest, &w), "writer thread");
	nanosleep(&stop, NULL);	/* the peer stays stopped this long: the case, not a synchronisation */
	/* It goes on: its thread finds the ring not empty and stores USED back, then it reads. */
	__atomic_store_n((uint32_t *)(void *)(m + T_SPILL0), FF_SPILL_USED, __ATOMIC_SEQ_CST);
	CHECK(t_recv_stream(sfd, N, 1) == 0, "bytes lost or the connection reset while the peer was stopped");
	pthread_join(t, NULL);
	CHECK(w.ret == 0, "the writer failed while the peer was stopped");
}

int main(int argc, char **argv)
{
	static void (*const cases[])(int, int, uint8_t *) = { case_stopped };

	(void)argc;
	return t_run_shm_cases(argv, cases, 1);
}
