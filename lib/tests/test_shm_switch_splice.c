/* SPDX-License-Identifier: MIT */
/* Description: splice from or to an shm connection moves it down first, then the kernel splices: bytes unread in the rings come first and in order, both ways, and the peer adopts at its next read */
/* Channels: shm shm-link */
#include "shimtest.h"

#define IN0	(100u << 10)	/* the peer wrote this much, unread */
#define OUT0	(50u << 10)	/* this end wrote this much, unread by the peer */
#define OUT1	(150u << 10)	/* then spliced in up to here */

/* A piece of the stream into fd through pipe p: written into the pipe, then all of it spliced on. */
static ssize_t splice_in(int fd, void *buf, size_t k, void *p_)
{
	int *p = p_;
	ssize_t w;

	if (write(p[1], buf, k) != (ssize_t)k)
		return -1;
	for (size_t done = 0; done < k; done += (size_t)w)
		if ((w = splice(p[0], NULL, fd, NULL, k - done, 0)) <= 0)
			return -1;
	return (ssize_t)k;
}

/* A piece of the stream out of fd through pipe p: spliced into the pipe, then read from it. */
static ssize_t splice_out(int fd, void *buf, size_t k, void *p_)
{
	int *p = p_;
	ssize_t r = splice(fd, NULL, p[1], NULL, k, 0);

	if (r <= 0 || read(p[0], buf, (size_t)r) != r)
		return -1;
	return r;
}

int main(int argc, char **argv)
{
	int cfd, sfd, p[2];
	ino_t cino, sino;

	(void)argc;
	t_setup_swapped_pair(argv, &cfd, &sfd);
	if (pipe(p))
		return T_EXIT_FAIL;
	cino = t_ino(cfd);
	sino = t_ino(sfd);
	CHECK(t_send_stream(sfd, IN0, 5) == 0, "peer's write");
	CHECK(t_send_stream(cfd, OUT0, 6) == 0, "this end's write");
	CHECK(t_get_stream(cfd, 0, IN0, 5, splice_out, p) == 0,
	      "splice out: the unread bytes are not intact");
	CHECK(t_moved_down(cfd, cino), "splice did not move the connection down");
	CHECK(t_put_stream(cfd, OUT0, OUT1, 6, splice_in, p) == 0, "splice in failed");
	CHECK(t_recv_stream(sfd, OUT1, 6) == 0, "the peer did not get the stream intact");
	CHECK(t_moved_down(sfd, sino), "the peer did not adopt");
	close(cfd);
	close(sfd);
	close(p[0]);
	close(p[1]);
	return t_shim_finish();
}
