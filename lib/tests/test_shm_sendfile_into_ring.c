/* SPDX-License-Identifier: MIT */
/* Description: sendfile from a file into a shared-memory connection (with an offset: the file position stays; without: it advances; more than a ring while the peer reads) delivers the file, and sendfile from a shared-memory connection into a file moves exactly the bytes the file took */
/* Channels: shm shm-link */
#include <sys/sendfile.h>

#include "shimtest.h"

#define LEN	(1u << 20)

static void *reader(void *p)
{
	return (void *)(intptr_t)t_recv_stream(*(int *)p, LEN, 8);
}

static int temp_file(const char *name)
{
	char path[PATH_MAX + 16];
	int f;

	t_path(path, sizeof(path), name);
	f = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	unlink(path);
	return f;
}

static void case_file_to_ring(int cfd, int sfd, int with_offset)
{
	int f = temp_file("in.dat");
	off_t off = 0, sent = 0;
	pthread_t th;
	void *ret;

	CHECK(f >= 0 && t_send_stream(f, LEN, 8) == 0, "write the file");
	lseek(f, 0, SEEK_SET);
	pthread_create(&th, NULL, reader, &sfd);
	while (sent < LEN) {
		ssize_t n = sendfile(cfd, f, with_offset ? &off : NULL, LEN - (size_t)sent);

		if (n <= 0)
			break;
		sent += n;
	}
	pthread_join(th, &ret);
	CHECK(sent == LEN && ret == NULL, "sendfile %s offset: sent %lld, reader %p",
	      with_offset ? "with" : "without", (long long)sent, ret);
	if (with_offset)
		CHECK(off == LEN && lseek(f, 0, SEEK_CUR) == 0, "offset %lld, file position %lld",
		      (long long)off, (long long)lseek(f, 0, SEEK_CUR));
	else
		CHECK(lseek(f, 0, SEEK_CUR) == LEN, "file position %lld", (long long)lseek(f, 0, SEEK_CUR));
	close(f);
}

static void case_ring_to_file(int cfd, int sfd)
{
	int f = temp_file("out.dat");
	char buf[300];
	ssize_t n;

	CHECK(t_send_stream(cfd, 300, 2) == 0, "send 300");
	n = sendfile(f, sfd, NULL, 200);
	CHECK(n == 200, "sendfile into a file: %zd (%s)", n, strerror(errno));
	CHECK(pread(f, buf, sizeof(buf), 0) == 200, "the file holds 200 bytes");
	for (int i = 0; i < 200; i++)
		if ((uint8_t)buf[i] != t_byte((uint64_t)i, 2)) {
			CHECK(0, "file byte %d differs", i);
			break;
		}
	CHECK(recv(sfd, buf, 100, MSG_WAITALL) == 100 && (uint8_t)buf[0] == t_byte(200, 2),
	      "the 100 bytes the file did not take are still there");
	close(f);
}

int main(int argc, char **argv)
{
	int cfd, sfd;

	(void)argc;
	t_setup_swapped_pair(argv, &cfd, &sfd);
	case_file_to_ring(cfd, sfd, 1);
	case_file_to_ring(cfd, sfd, 0);
	case_ring_to_file(cfd, sfd);
	close(cfd);
	close(sfd);
	return t_shim_finish();
}
