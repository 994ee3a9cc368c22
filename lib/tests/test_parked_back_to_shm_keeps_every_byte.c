/* SPDX-License-Identifier: MIT */
/* Description: a connection parked on TCP goes back onto shared memory while both ends stream to each other in bursts (4 KiB, then a pause of 0-4 ms, 1000 times, blocking writes; a reader thread each way that sleeps in poll(), as a thread asleep in read() keeps it off shm): a move back only when neither end has a byte in flight, counted on TCP by what the peer acknowledged and what is left to read at each end once both hold it, loses, repeats and reorders nothing: each reader checks every byte to the writer's shutdown, and counts them all */
/* Channels: shm */
#include "shimtest.h"

#define BURST	(4u << 10)
#define BURSTS	1000

struct job {
	int fd;
	uint8_t seed;
	int err;
	size_t bytes;
};

static void *writer(void *arg)
{
	struct job *j = arg;
	unsigned r = j->seed;

	for (int i = 0; i < BURSTS && !j->err; i++) {
		j->err = t_send_stream_from(j->fd, j->bytes, j->bytes + BURST, j->seed);
		j->bytes += BURST;
		usleep((useconds_t)(rand_r(&r) % 4000));
	}
	shutdown(j->fd, SHUT_WR);
	return NULL;
}

static void *reader(void *arg)
{
	static _Thread_local uint8_t buf[BURST];
	struct job *j = arg;
	ssize_t n;

	while (!j->err) {
		struct pollfd p = { j->fd, POLLIN, 0 };

		if (poll(&p, 1, 5000) != 1) {
			j->err = -ETIMEDOUT;
			break;
		}
		n = recv(j->fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == 0)
			break;
		if (n < 0 && errno == EAGAIN)
			continue;
		if (n < 0) {
			j->err = -errno;
			break;
		}
		for (ssize_t i = 0; i < n && !j->err; i++)
			if (buf[i] != t_byte(j->bytes + (size_t)i, j->seed))
				j->err = -2;
		j->bytes += (size_t)n;
	}
	return NULL;
}

/* Stream out (seed out) and read in (seed in) on fd, both to the end; 1 when all went and came intact. */
static int both_ways(int fd, uint8_t out, uint8_t in, const char *who)
{
	struct job w = { fd, out, 0, 0 }, r = { fd, in, 0, 0 };
	pthread_t tw, tr;

	CHECK(!pthread_create(&tw, NULL, writer, &w) && !pthread_create(&tr, NULL, reader, &r), "threads");
	pthread_join(tw, NULL);
	pthread_join(tr, NULL);
	CHECK(!w.err, "%s: writing: %d", who, w.err);
	CHECK(!r.err && r.bytes == (size_t)BURSTS * BURST, "%s: read %zu bytes of %zu (%d: -2 a byte differs)", who,
	      r.bytes, (size_t)BURSTS * BURST, r.err);
	return !w.err && !r.err;
}

static int server(int ctl)
{
	int lfd, fd = t_serve_one(ctl, &lfd);
	char c;

	both_ways(fd, 6, 5, "acceptor");
	CHECK(read(ctl, &c, 1) == 1, "the connector's end");
	close(fd);
	close(lfd);
	return t_exit_code();
}

int main(int argc, char **argv)
{
	int ctl, fd;
	pid_t pid;

	(void)argc;
	setenv("FF_TEST_PARK_MS", "100", 1);
	setenv("FF_TEST_RESUME_MS", "300", 1);
	t_shim_setup(argv, FA_BROKER);
	fd = t_connect_forked(server, &ctl, &pid);
	both_ways(fd, 5, 6, "connector");
	CHECK(t_agent_count("park") == 2, "%d ends parked, want 2", t_agent_count("park"));
	CHECK(t_ledger_entries(FF_PATH_SHM, "") == 2, "%d ends back on shm, want 2 (%d RESUMEs sent)",
	      t_ledger_entries(FF_PATH_SHM, ""), t_agent_count("resume"));
	CHECK(write(ctl, "e", 1) == 1, "the end");
	close(fd);
	t_wait_child(pid, "the acceptor");
	return t_exit_code();
}
