/* SPDX-License-Identifier: MIT */
/* Description: shutdown(SHUT_WR) on a shared-memory connection after more than a ring of data: the peer reads every byte then EOF (also when it was already asleep in recv), and the answer still flows back; SHUT_RD ends local reads once the ring is empty */
/* Channels: shm shm-link */
#include "shimtest.h"

#define N	(1u << 20)	/* four 256 KiB rings */

static void *send_then_shut(void *p)
{
	int fd = *(int *)p;

	if (t_send_stream(fd, N, 6) || shutdown(fd, SHUT_WR))
		return p;
	return NULL;
}

static void *sleep_in_recv(void *p)
{
	char c;

	return (void *)(intptr_t)recv(*(int *)p, &c, 1, 0);
}

int main(int argc, char **argv)
{
	char buf[64];
	pthread_t th;
	void *ret;
	int cfd, sfd;

	(void)argc;
	setenv("FF_TEST_SHM_RING", "262144", 0);	/* read by the fake agent: the cases fill its rings */
	t_setup_swapped_pair(argv, &cfd, &sfd);
	pthread_create(&th, NULL, send_then_shut, &cfd);
	CHECK(t_recv_stream(sfd, N, 6) == 0, "data before the half-close");
	CHECK(read(sfd, buf, sizeof(buf)) == 0, "EOF after the data");
	CHECK(read(sfd, buf, sizeof(buf)) == 0, "EOF stays");
	pthread_join(th, &ret);
	CHECK(ret == NULL, "sender");
	CHECK(write(sfd, "answer", 6) == 6, "answer after the peer's SHUT_WR");
	CHECK(recv(cfd, buf, 6, MSG_WAITALL) == 6 && !memcmp(buf, "answer", 6), "answer arrives");
	close(cfd);
	close(sfd);

	/* The reader is asleep when the peer shuts down writing: it wakes with EOF. */
	t_pair(AF_INET, &cfd, &sfd);
	pthread_create(&th, NULL, sleep_in_recv, &sfd);
	usleep(100000);
	CHECK(shutdown(cfd, SHUT_WR) == 0, "shutdown");
	pthread_join(th, &ret);
	CHECK(ret == NULL, "recv asleep at the half-close gave %ld, want 0 (EOF)", (long)(intptr_t)ret);

	/* SHUT_RD: what is queued can still be read, then EOF without waiting. */
	CHECK(send(cfd, "q", 1, MSG_NOSIGNAL) == -1 && errno == EPIPE, "send after SHUT_WR");
	CHECK(write(sfd, "xy", 2) == 2, "write");
	CHECK(shutdown(sfd, SHUT_RD) == 0, "SHUT_RD");
	CHECK(read(sfd, buf, sizeof(buf)) == 0, "read after SHUT_RD");
	close(cfd);
	close(sfd);
	return t_shim_finish();
}
