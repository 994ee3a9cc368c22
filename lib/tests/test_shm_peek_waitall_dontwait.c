/* SPDX-License-Identifier: MIT */
/* Description: on a shared-memory connection: MSG_PEEK shows without taking, MSG_PEEK|MSG_WAITALL waits for the whole length, MSG_WAITALL gathers more than a ring holds, MSG_DONTWAIT gives EAGAIN on an empty ring and a short count then EAGAIN on a full one, MSG_TRUNC drops bytes */
/* Channels: shm shm-link */
#include "shimtest.h"

#define RING	(256u << 10)

struct late {
	int fd;
	size_t n;
	int useconds;
};

/* Write n stream bytes (seed 4) after a pause, in pieces. */
static void *write_late(void *p)
{
	struct late *l = p;

	usleep((useconds_t)l->useconds);
	return (void *)(intptr_t)t_send_stream(l->fd, l->n, 4);
}

int main(int argc, char **argv)
{
	static uint8_t big[3 * RING];
	char buf[64] = { 0 };
	struct late l;
	pthread_t th;
	void *ret;
	int cfd, sfd;
	ssize_t r;

	(void)argc;
	setenv("FF_TEST_SHM_RING", "262144", 0);	/* read by the fake agent: the cases fill its rings */
	t_setup_swapped_pair(argv, &cfd, &sfd);

	r = recv(cfd, buf, sizeof(buf), MSG_DONTWAIT);
	CHECK(r == -1 && errno == EAGAIN, "DONTWAIT on an empty ring: %zd (%s)", r, strerror(errno));

	CHECK(send(sfd, "abcde", 5, 0) == 5, "send");
	CHECK(recv(cfd, buf, 3, MSG_PEEK) == 3 && !memcmp(buf, "abc", 3), "peek 3");
	CHECK(recv(cfd, buf, sizeof(buf), MSG_PEEK) == 5 && !memcmp(buf, "abcde", 5), "peek all");
	/* PEEK|WAITALL: 10 wanted, 5 there, 5 more come later; still nothing taken. */
	l = (struct late){ sfd, 5, 50000 };
	pthread_create(&th, NULL, write_late, &l);
	r = recv(cfd, buf, 10, MSG_PEEK | MSG_WAITALL);
	pthread_join(th, &ret);
	CHECK(r == 10 && !memcmp(buf, "abcde", 5) && (uint8_t)buf[5] == t_byte(0, 4),
	      "PEEK|WAITALL gave %zd", r);
	CHECK(recv(cfd, buf, 10, 0) == 10 && !memcmp(buf, "abcde", 5), "read after peeks");

	/* MSG_TRUNC drops: 100 bytes gone, the next read continues after them. */
	CHECK(t_send_stream(sfd, 200, 5) == 0, "send 200");
	CHECK(recv(cfd, NULL, 100, MSG_TRUNC) == 100, "TRUNC");
	CHECK(recv(cfd, buf, 1, 0) == 1 && (uint8_t)buf[0] == t_byte(100, 5), "after TRUNC");
	CHECK(recv(cfd, NULL, 99, MSG_TRUNC | MSG_WAITALL) == 99, "TRUNC the rest");

	/* WAITALL for three rings' worth, written in pieces by the peer. */
	l = (struct late){ sfd, sizeof(big), 10000 };
	pthread_create(&th, NULL, write_late, &l);
	r = recv(cfd, big, sizeof(big), MSG_WAITALL);
	pthread_join(th, &ret);
	CHECK(r == (ssize_t)sizeof(big) && ret == NULL, "WAITALL over 3 rings: %zd", r);
	for (size_t i = 0; i < sizeof(big) && r == (ssize_t)sizeof(big); i++)
		if (big[i] != t_byte(i, 4)) {
			CHECK(0, "WAITALL: byte %zu differs", i);
			break;
		}

	/* DONTWAIT into a ring nobody reads: what fits, then EAGAIN. */
	r = send(cfd, big, sizeof(big), MSG_DONTWAIT);
	CHECK(r == RING, "DONTWAIT send into an empty ring: %zd, want %u", r, RING);
	r = send(cfd, big, 1, MSG_DONTWAIT);
	CHECK(r == -1 && errno == EAGAIN, "DONTWAIT send into a full ring: %zd (%s)", r,
	      strerror(errno));
	CHECK(recv(sfd, big, sizeof(big), MSG_WAITALL | MSG_DONTWAIT) == RING, "drain");
	close(cfd);
	close(sfd);
	return t_shim_finish();
}
