/* SPDX-License-Identifier: MIT */
/* Description: writing to a shared-memory connection whose peer closed gives EPIPE and SIGPIPE (not with MSG_NOSIGNAL) once the first write after the close went nowhere, as TCP's, also for writev/sendmsg and for a writer already blocked on a full ring (woken, not hung); writing after one's own SHUT_WR too */
/* Channels: shm shm-link */
#include <sys/uio.h>

#include "shimtest.h"

#define RING	(256u << 10)

static volatile sig_atomic_t pipes;

static void on_pipe(int sig)
{
	(void)sig;
	pipes++;
}

struct blocked {
	int fd;
	ssize_t r;
	int err;
};

static void *write_too_much(void *p)
{
	static char big[2 * RING];
	struct blocked *b = p;

	b->r = send(b->fd, big, sizeof(big), MSG_NOSIGNAL);
	b->err = errno;
	return NULL;
}

static void case_blocked_writer(void)
{
	struct blocked b = { 0 };
	struct timespec ts;
	pthread_t th;
	int cfd, sfd;

	t_pair(AF_INET, &cfd, &sfd);
	b.fd = cfd;
	pthread_create(&th, NULL, write_too_much, &b);
	usleep(100000);		/* the ring is full, the writer asleep */
	close(sfd);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 1;
	CHECK(pthread_timedjoin_np(th, NULL, &ts) == 0, "the blocked writer is still blocked");
	/* TCP semantics: what went out is reported; the error comes with the next call. */
	CHECK(b.r == RING, "blocked send returned %zd (%s), want the %u bytes that fit", b.r,
	      strerror(b.err), RING);
	CHECK(send(cfd, "x", 1, MSG_NOSIGNAL) == -1 && errno == EPIPE, "next send: %s",
	      strerror(errno));
	close(cfd);
}

int main(int argc, char **argv)
{
	struct iovec iov = { (void *)"x", 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	int cfd, sfd;
	ssize_t r;

	(void)argc;
	setenv("FF_TEST_SHM_RING", "262144", 0);	/* read by the fake agent: the cases fill its rings */
	t_shim_setup(argv, FA_BROKER);
	signal(SIGPIPE, on_pipe);
	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(cfd), "not on shm");
	close(sfd);
	/* As TCP: the first write to a peer that read everything and closed is taken (it resets). */
	r = send(cfd, "x", 1, MSG_NOSIGNAL);
	CHECK(r == 1 && pipes == 0, "the first write after the peer closed: %zd (%s)", r, strerror(errno));
	r = send(cfd, "x", 1, MSG_NOSIGNAL);
	CHECK(r == -1 && errno == EPIPE && pipes == 0, "MSG_NOSIGNAL: %zd (%s), %d signals", r,
	      strerror(errno), (int)pipes);
	r = write(cfd, "x", 1);
	CHECK(r == -1 && errno == EPIPE && pipes == 1, "write: %zd (%s), %d signals", r,
	      strerror(errno), (int)pipes);
	r = writev(cfd, &iov, 1);
	CHECK(r == -1 && errno == EPIPE && pipes == 2, "writev: %zd, %d signals", r, (int)pipes);
	r = sendmsg(cfd, &mh, 0);
	CHECK(r == -1 && errno == EPIPE && pipes == 3, "sendmsg: %zd, %d signals", r, (int)pipes);
	close(cfd);

	t_pair(AF_INET, &cfd, &sfd);
	CHECK(shutdown(cfd, SHUT_WR) == 0, "shutdown");
	r = write(cfd, "x", 1);
	CHECK(r == -1 && errno == EPIPE && pipes == 4, "write after SHUT_WR: %zd, %d signals", r,
	      (int)pipes);
	close(cfd);
	close(sfd);

	case_blocked_writer();
	return t_shim_finish();
}
