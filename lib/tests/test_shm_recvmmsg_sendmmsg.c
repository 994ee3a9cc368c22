/* SPDX-License-Identifier: MIT */
/* Description: sendmmsg and recvmmsg on a shared-memory connection carry each entry's bytes in order (as on TCP, a stream: each receive takes what is there up to its buffer), MSG_WAITFORONE stops at the first empty ring, MSG_DONTWAIT on an empty ring gives EAGAIN, and a timeout is written back */
/* Channels: shm shm-link */
#include "shimtest.h"

int main(int argc, char **argv)
{
	char out[3][5] = { "aaaaa", "bbbbb", "ccccc" }, in[4][5];
	struct iovec oi[3], ii[4];
	struct mmsghdr om[3], im[4];
	struct timespec ts = { 5, 0 };
	int cfd, sfd, r;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(cfd), "not on shm");
	memset(om, 0, sizeof(om));
	memset(im, 0, sizeof(im));
	for (int i = 0; i < 3; i++) {
		oi[i] = (struct iovec){ out[i], 5 };
		om[i].msg_hdr.msg_iov = &oi[i];
		om[i].msg_hdr.msg_iovlen = 1;
	}
	for (int i = 0; i < 4; i++) {
		ii[i] = (struct iovec){ in[i], 5 };
		im[i].msg_hdr.msg_iov = &ii[i];
		im[i].msg_hdr.msg_iovlen = 1;
	}
	r = sendmmsg(cfd, om, 3, 0);
	CHECK(r == 3 && om[0].msg_len == 5 && om[2].msg_len == 5, "sendmmsg: %d", r);
	r = recvmmsg(sfd, im, 4, MSG_WAITFORONE, &ts);
	CHECK(r == 3, "recvmmsg with WAITFORONE: %d (%s), want 3", r, strerror(errno));
	for (int i = 0; i < 3 && r == 3; i++)
		CHECK(im[i].msg_len == 5 && !memcmp(in[i], out[i], 5), "entry %d", i);
	CHECK(ts.tv_sec <= 5 && (ts.tv_sec > 0 || ts.tv_nsec > 0), "timeout not written back");
	r = recvmmsg(sfd, im, 4, MSG_DONTWAIT, NULL);
	CHECK(r == -1 && errno == EAGAIN, "recvmmsg on an empty ring: %d (%s)", r, strerror(errno));
	close(cfd);
	close(sfd);
	return t_shim_finish();
}
