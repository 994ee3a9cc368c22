/* SPDX-License-Identifier: MIT */
/* Description: MSG_PEEK leaves data in place, MSG_WAITALL waits for the whole length across several writes, MSG_DONTWAIT says EAGAIN, readv/writev/sendmsg/recvmsg carry data, on a swapped connection */
/* Channels: unix host-tcp shm shm-link */
#include <sys/uio.h>

#include "shimtest.h"

static void *late_writer(void *p)
{
	int fd = *(int *)p;

	usleep(20000);
	if (write(fd, "world", 5) != 5)
		return p;
	return NULL;
}

int main(int argc, char **argv)
{
	char buf[16] = { 0 }, a[3], b[4];
	struct iovec iov[2] = { { a, sizeof(a) }, { b, sizeof(b) } };
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };
	int cfd, sfd;
	pthread_t th;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(cfd), "not swapped");
	CHECK(recv(cfd, buf, sizeof(buf), MSG_DONTWAIT) == -1 && errno == EAGAIN, "MSG_DONTWAIT");
	CHECK(write(sfd, "hello", 5) == 5, "write");
	CHECK(recv(cfd, buf, 5, MSG_PEEK | MSG_WAITALL) == 5 && !memcmp(buf, "hello", 5), "peek");
	memset(buf, 0, sizeof(buf));
	CHECK(recv(cfd, buf, 3, MSG_PEEK) == 3 && !memcmp(buf, "hel", 3), "peek again");
	pthread_create(&th, NULL, late_writer, &sfd);
	CHECK(recv(cfd, buf, 10, MSG_WAITALL) == 10 && !memcmp(buf, "helloworld", 10),
	      "MSG_WAITALL: %.10s", buf);
	pthread_join(th, NULL);
	CHECK(writev(sfd, (struct iovec[]){ { (void *)"abc", 3 }, { (void *)"defg", 4 } }, 2) == 7, "writev");
	CHECK(recvmsg(cfd, &mh, MSG_WAITALL) == 7 && !memcmp(a, "abc", 3) && !memcmp(b, "defg", 4),
	      "recvmsg");
	mh = (struct msghdr){ .msg_iov = iov, .msg_iovlen = 2 };
	CHECK(sendmsg(cfd, &mh, 0) == 7, "sendmsg");
	CHECK(readv(sfd, (struct iovec[]){ { buf, 7 } }, 1) == 7 && !memcmp(buf, "abcdefg", 7), "readv");
	close(cfd);
	close(sfd);
	return t_shim_finish();
}
