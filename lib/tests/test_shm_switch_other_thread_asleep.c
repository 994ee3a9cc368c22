/* SPDX-License-Identifier: MIT */
/* Description: one end moves the connection down (fork) while both threads of the other end sleep on the bell socket (one reading, one writing into a full ring); whichever of them adopts, the other wakes and goes to the new kernel socket: it takes no byte out of it as a doorbell (the stream is all doorbell bytes, 'D') and does not sleep on it for the bell, so every byte arrives once both ways and nothing hangs */
/* Channels: shm shm-link */
#include "shimtest.h"

#define ROUNDS	20
#define SENT0	(64u << 10)
#define READ0	(16u << 10)
#define TOTAL	(2u << 20)
/* The doorbell byte of the bell socket (docs/SHM.md). */
#define BELL	'D'

/* n bytes of BELL; 0 if all were taken. */
static int send_bells(int fd, size_t n)
{
	char buf[16384];

	memset(buf, BELL, sizeof(buf));
	while (n) {
		ssize_t w = write(fd, buf, n < sizeof(buf) ? n : sizeof(buf));

		if (w <= 0)
			return -1;
		n -= (size_t)w;
	}
	return 0;
}

static int all_bells(const char *b, ssize_t n)
{
	for (ssize_t i = 0; i < n; i++)
		if (b[i] != BELL)
			return 0;
	return 1;
}

/* Read to EOF: the count of bytes, all BELL (-1 for another byte or an error). */
static long recv_bells(int fd)
{
	char buf[16384];
	long got = 0;
	ssize_t r;

	while ((r = read(fd, buf, sizeof(buf))) > 0) {
		if (!all_bells(buf, r))
			return -1;
		got += r;
	}
	return r ? -1 : got;
}

struct reader {
	int fd;
	long got;
};

static void *reader(void *p)
{
	struct reader *rd = p;

	rd->got = recv_bells(rd->fd);
	return NULL;
}

/* Both directions to the end: n bytes out (then SHUT_WR), the rest in; 0 if want came in. */
static int duplex_bells(int fd, size_t n, long want)
{
	struct reader rd = { .fd = fd };
	pthread_t th;
	int w;

	if (pthread_create(&th, NULL, reader, &rd))
		return -1;
	w = send_bells(fd, n) || shutdown(fd, SHUT_WR);
	pthread_join(th, NULL);
	return w || rd.got != want ? -1 : 0;
}

static int peer(int lfd, int ready)
{
	(void)ready;
	for (int i = 0; i < ROUNDS; i++) {
		int fd = accept(lfd, NULL, NULL);

		if (fd < 0 || !t_swapped(fd))
			return 2;
		/* Both threads end up asleep: nothing more to read, the ring to us full. */
		if (duplex_bells(fd, TOTAL, TOTAL))
			return 3;
		close(fd);
	}
	return 0;
}

int main(int argc, char **argv)
{
	int ready, lfd;
	uint16_t port;
	pid_t pid;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	pid = t_fork_peer(peer, &lfd, &port, &ready);
	for (int i = 0; i < ROUNDS && !t_failures; i++) {
		int fd = t_connect(AF_INET, port);
		char buf[READ0];
		ssize_t got;
		pid_t child;

		CHECK(t_swapped(fd), "round %d: not on shm", i);
		CHECK(send_bells(fd, SENT0) == 0, "round %d: write before the move", i);
		got = read(fd, buf, sizeof(buf));
		CHECK(got > 0 && all_bells(buf, got), "round %d: read before the move", i);
		/* Let the peer's threads go to sleep on the bell socket. */
		usleep(20000);
		child = fork();		/* moves the connection down */
		if (child == 0)
			_exit(0);
		waitpid(child, NULL, 0);
		CHECK(t_moved_down(fd, 0), "round %d: not moved down", i);
		CHECK(duplex_bells(fd, TOTAL - SENT0, (long)TOTAL - got) == 0,
		      "round %d: bytes lost, changed or stuck after the move", i);
		close(fd);
	}
	t_wait_child(pid, "peer (status: 2 not shm, 3 stream)");
	close(lfd);
	return t_shim_finish();
}
