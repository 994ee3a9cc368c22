/* SPDX-License-Identifier: MIT */
/* Description: an shm connection parked on TCP while the program streams through it both ways in four threads (blocking reads and writes of 64 KiB, on and on until 4 MiB after the park; a thread of the program finds switch_by PARKED in the middle of a call, possibly before the parking thread got this end's socket, and waits for it) loses, repeats and reorders no byte: each reader checks every byte up to the writer's shutdown, and counts as many as were written */
/* Channels: shm */
#include <pthread.h>

#include "shimtest.h"

#define CHUNK	(64u << 10)
#define AFTER	64		/* chunks written once the fd is TCP */
#define LIMIT	(4ull << 30)	/* never parked: stop there */

struct job {
	int fd, write;
	uint8_t seed;
	int err;
	size_t bytes;
};

static void writer(struct job *j)
{
	int after = -1;	/* chunks since the fd was found TCP; -1: not yet */

	while (!j->err && after < AFTER && j->bytes < LIMIT) {
		j->err = t_send_stream_from(j->fd, j->bytes, j->bytes + CHUNK, j->seed);
		j->bytes += CHUNK;
		if (after >= 0 || t_real_domain(j->fd) == AF_INET)
			after++;
	}
	shutdown(j->fd, SHUT_WR);
}

static void reader(struct job *j)
{
	static _Thread_local uint8_t buf[CHUNK];
	ssize_t n;

	while (!j->err && (n = read(j->fd, buf, sizeof(buf))) != 0) {
		if (n < 0) {
			j->err = -errno;
			break;
		}
		for (ssize_t i = 0; i < n && !j->err; i++)
			if (buf[i] != t_byte(j->bytes + (size_t)i, j->seed))
				j->err = -2;
		j->bytes += (size_t)n;
	}
}

static void *run(void *arg)
{
	struct job *j = arg;

	if (j->write)
		writer(j);
	else
		reader(j);
	return NULL;
}

int main(int argc, char **argv)
{
	struct job jobs[4];
	pthread_t th[4];
	int cfd, sfd;

	(void)argc;
	setenv("FF_TEST_PARK_MS", "50", 1);
	t_setup_swapped_pair(argv, &cfd, &sfd);
	jobs[0] = (struct job){ cfd, 1, 5, 0, 0 };
	jobs[1] = (struct job){ sfd, 0, 5, 0, 0 };
	jobs[2] = (struct job){ sfd, 1, 6, 0, 0 };
	jobs[3] = (struct job){ cfd, 0, 6, 0, 0 };
	for (int i = 0; i < 4; i++)
		CHECK(!pthread_create(&th[i], NULL, run, &jobs[i]), "thread %d", i);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	CHECK(!jobs[0].err && !jobs[2].err, "writes: %d, %d", jobs[0].err, jobs[2].err);
	CHECK(!jobs[1].err && !jobs[3].err,
	      "the streams read back: %d (connector to acceptor), %d (back); -2: a byte differs",
	      jobs[1].err, jobs[3].err);
	CHECK(jobs[1].bytes == jobs[0].bytes && jobs[3].bytes == jobs[2].bytes,
	      "read %zu of %zu bytes one way, %zu of %zu the other", jobs[1].bytes, jobs[0].bytes,
	      jobs[3].bytes, jobs[2].bytes);
	CHECK(t_agent_count("watch parked") == 2, "the agent heard %d ends parked, want 2",
	      t_agent_count("watch parked"));
	CHECK(t_real_domain(cfd) == AF_INET && t_real_domain(sfd) == AF_INET,
	      "after the streams the fds are of families %d and %d, not TCP sockets",
	      t_real_domain(cfd), t_real_domain(sfd));
	return t_exit_code();
}
