/* SPDX-License-Identifier: MIT */
/* Description: sendfile from an shm connection into a pipe, blocked writing to the full pipe while the peer moves the connection down: the bytes it passed on are taken out of the stream once, on the kernel socket, never delivered twice or lost */
/* Channels: shm shm-link */
#include <sys/sendfile.h>

#include "shimtest.h"

#define STREAM	(64u << 10)
#define CHUNK	1000u

struct job {
	int out, in;
	ssize_t r;
};

static void *sendfile_job(void *p)
{
	struct job *j = p;

	j->r = sendfile(j->out, j->in, NULL, CHUNK);
	return NULL;
}

int main(int argc, char **argv)
{
	static uint8_t filler[1 << 16];
	uint8_t buf[CHUNK];
	int cfd, sfd, p[2], sp[2], fill;
	struct job j;
	pthread_t th;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	if (pipe(p) || pipe(sp))
		return T_EXIT_FAIL;
	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(cfd), "not on shm");
	CHECK(t_send_stream(sfd, STREAM, 4) == 0, "the peer's write");
	/* The pipe full, so sendfile's write to it blocks after it looked at the ring. */
	fcntl(p[1], F_SETFL, O_NONBLOCK);
	for (fill = 0; write(p[1], filler, sizeof(filler)) > 0;)
		fill++;
	fcntl(p[1], F_SETFL, 0);
	j = (struct job){ .out = p[1], .in = cfd };
	pthread_create(&th, NULL, sendfile_job, &j);
	usleep(100000);
	/* The peer moves down (splice needs a kernel socket), then the pipe drains. */
	CHECK(splice(sfd, NULL, sp[1], NULL, 0, 0) >= 0, "splice on the peer: %s", strerror(errno));
	while (read(p[0], filler, sizeof(filler)) == sizeof(filler) && --fill > 0)
		;
	pthread_join(th, NULL);
	CHECK(j.r == CHUNK, "sendfile gave %zd", j.r);
	CHECK(read(p[0], buf, CHUNK) == CHUNK, "the bytes sendfile passed on");
	for (unsigned i = 0; i < CHUNK; i++)
		CHECK(buf[i] == t_byte(i, 4), "sendfile passed on byte %u wrong", i);
	CHECK(t_recv_stream_from(cfd, CHUNK, STREAM, 4) == 0,
	      "the rest of the stream is not intact (bytes read twice, or lost)");
	close(cfd);
	close(sfd);
	return t_shim_finish();
}
