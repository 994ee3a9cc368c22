/* SPDX-License-Identifier: MIT */
/* Description: splice from or to an shm connection moves it down first, then the kernel splices: bytes unread in the rings come first and in order, both ways, and the peer adopts at its next read */
/* Channels: shm */
#include "shimtest.h"

#define IN0	(100u << 10)	/* the peer wrote this much, unread */
#define OUT0	(50u << 10)	/* this end wrote this much, unread by the peer */
#define OUT1	(150u << 10)	/* then spliced in up to here */

/* The bytes [off, n) of stream seed into pipe w, then spliced into fd. 0 if all went. */
static int splice_in(int fd, int p[2], size_t off, size_t n, uint8_t seed)
{
	uint8_t buf[16384];

	while (off < n) {
		size_t k = n - off < sizeof(buf) ? n - off : sizeof(buf);
		ssize_t w;

		for (size_t i = 0; i < k; i++)
			buf[i] = t_byte(off + i, seed);
		if (write(p[1], buf, k) != (ssize_t)k)
			return -1;
		for (size_t done = 0; done < k; done += (size_t)w)
			if ((w = splice(p[0], NULL, fd, NULL, k - done, 0)) <= 0)
				return -1;
		off += k;
	}
	return 0;
}

/* Bytes [0, n) of stream seed spliced out of fd through the pipe; 0 if all were intact. */
static int splice_out(int fd, int p[2], size_t n, uint8_t seed)
{
	uint8_t buf[16384];
	size_t off = 0;

	while (off < n) {
		size_t k = n - off < sizeof(buf) ? n - off : sizeof(buf);
		ssize_t r = splice(fd, NULL, p[1], NULL, k, 0);

		if (r <= 0 || read(p[0], buf, (size_t)r) != r)
			return -1;
		for (ssize_t i = 0; i < r; i++)
			if (buf[i] != t_byte(off + (size_t)i, seed))
				return -2;
		off += (size_t)r;
	}
	return 0;
}

int main(int argc, char **argv)
{
	int cfd, sfd, p[2];
	ino_t cino, sino;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	if (pipe(p))
		return T_EXIT_FAIL;
	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(cfd) && t_swapped(sfd), "not on shm");
	cino = t_ino(cfd);
	sino = t_ino(sfd);
	CHECK(t_send_stream(sfd, IN0, 5) == 0, "peer's write");
	CHECK(t_send_stream(cfd, OUT0, 6) == 0, "this end's write");
	CHECK(splice_out(cfd, p, IN0, 5) == 0, "splice out: the unread bytes are not intact");
	CHECK(t_moved_down(cfd, cino), "splice did not move the connection down");
	CHECK(splice_in(cfd, p, OUT0, OUT1, 6) == 0, "splice in failed");
	CHECK(t_recv_stream(sfd, OUT1, 6) == 0, "the peer did not get the stream intact");
	CHECK(t_moved_down(sfd, sino), "the peer did not adopt");
	close(cfd);
	close(sfd);
	close(p[0]);
	close(p[1]);
	return t_shim_finish();
}
