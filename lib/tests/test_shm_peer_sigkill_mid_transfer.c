/* SPDX-License-Identifier: MIT */
/* Description: a peer killed with SIGKILL in the middle of a transfer: the reader gets every byte that was sent, then EOF or ECONNRESET within 1 s; a writer blocked on a full connection gets EPIPE or ECONNRESET within 1 s; neither hangs */
/* Channels: unix host-tcp shm shm-link */
#include "shimtest.h"

#define BEFORE	(16u << 20)	/* read before the kill */

static int endless_writer(uint16_t port)
{
	int fd = t_connect(AF_INET, port);

	t_send_stream(fd, SIZE_MAX, 9);	/* until killed */
	return 1;
}

/* The sender dies mid-stream: what arrived is intact, then the end, promptly. */
static void case_sender_killed(void)
{
	uint8_t buf[65536];
	uint16_t port;
	int lfd = t_listen(AF_INET, &port), fd, bad = 0;
	uint64_t got = 0;
	int64_t t0;
	ssize_t r;
	pid_t pid = fork();

	if (pid == 0)
		_exit(endless_writer(port));
	fd = accept(lfd, NULL, NULL);
	close(lfd);
	CHECK(t_swapped(fd), "not swapped");
	CHECK(t_recv_stream(fd, BEFORE, 9) == 0, "data before the kill");
	got = BEFORE;
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	t0 = t_ms();
	while ((r = read(fd, buf, sizeof(buf))) > 0) {
		for (ssize_t i = 0; i < r && !bad; i++)
			bad = buf[i] != t_byte(got + (uint64_t)i, 9);
		got += (uint64_t)r;
	}
	CHECK(!bad, "a byte sent before the kill arrived corrupted");
	CHECK(r == 0 || errno == ECONNRESET, "read after the kill: %s", strerror(errno));
	CHECK(t_ms() - t0 < 1000, "the end came %lld ms after the kill", (long long)(t_ms() - t0));
	close(fd);
}

static int stalled_reader(uint16_t port)
{
	int fd = t_connect(AF_INET, port);
	char c;

	if (read(fd, &c, 1) != 1)
		return 1;
	pause();		/* reads no more: the writer fills the connection */
	return 1;
}

struct killer {
	pid_t pid;
	int64_t t0;
};

static void *kill_later(void *p)
{
	struct killer *k = p;

	usleep(300000);		/* the writer is blocked by then */
	k->t0 = t_ms();
	kill(k->pid, SIGKILL);
	return NULL;
}

static void case_reader_killed(void)
{
	static char buf[65536];
	struct killer k;
	uint16_t port;
	int lfd = t_listen(AF_INET, &port), fd;
	pthread_t th;
	ssize_t r;

	k.pid = fork();
	if (k.pid == 0)
		_exit(stalled_reader(port));
	fd = accept(lfd, NULL, NULL);
	close(lfd);
	CHECK(t_swapped(fd), "not swapped");
	pthread_create(&th, NULL, kill_later, &k);
	while ((r = send(fd, buf, sizeof(buf), MSG_NOSIGNAL)) > 0)
		;
	pthread_join(th, NULL);
	waitpid(k.pid, NULL, 0);
	CHECK(errno == EPIPE || errno == ECONNRESET, "send after the kill: %s", strerror(errno));
	CHECK(t_ms() - k.t0 < 1000, "the error came %lld ms after the kill",
	      (long long)(t_ms() - k.t0));
	close(fd);
}

int main(int argc, char **argv)
{
	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	case_sender_killed();
	case_reader_killed();
	CHECK(t_fast_await(2) == 2, "%d fast connections", t_fast_conns());
	return t_shim_finish();
}
