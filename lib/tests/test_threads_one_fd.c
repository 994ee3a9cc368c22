/* SPDX-License-Identifier: MIT */
/* Description: two threads use one swapped fd at once (one writes 8 MiB, one reads 8 MiB) while the peer echoes; all bytes arrive intact */
/* Channels: unix host-tcp shm shm-link */
#include "shimtest.h"

#define N	(8u << 20)

static int fd_c;

static void *writer(void *p)
{
	(void)p;
	return (void *)(intptr_t)t_send_stream(fd_c, N, 5);
}

static void *echo(void *p)
{
	int fd = *(int *)p;
	char buf[65536];
	size_t total = 0;

	while (total < N) {
		ssize_t r = read(fd, buf, sizeof(buf));

		if (r <= 0 || write(fd, buf, (size_t)r) != r)
			return (void *)1;
		total += (size_t)r;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t w, e;
	void *wr, *er;
	int sfd;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	t_pair(AF_INET, &fd_c, &sfd);
	CHECK(t_swapped(fd_c), "not swapped");
	pthread_create(&e, NULL, echo, &sfd);
	pthread_create(&w, NULL, writer, NULL);
	CHECK(t_recv_stream(fd_c, N, 5) == 0, "reader thread: data lost or corrupted");
	pthread_join(w, &wr);
	pthread_join(e, &er);
	CHECK(wr == NULL && er == NULL, "writer %p echo %p", wr, er);
	close(fd_c);
	close(sfd);
	return t_shim_finish();
}
