/* SPDX-License-Identifier: MIT */
/* Description: on a shared-memory connection SO_RCVTIMEO/SO_SNDTIMEO end a wait with EAGAIN, O_NONBLOCK set by fcntl, by ioctl(FIONBIO) or by a raw system call gives EAGAIN, and FIONREAD/SIOCINQ/SIOCOUTQ report the queued bytes */
/* Channels: shm shm-link */
#include <linux/sockios.h>
#include <sys/ioctl.h>

#include "shimtest.h"

#define RING	(256u << 10)

static void set_timeo(int fd, int opt, int ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	CHECK(setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof(tv)) == 0, "setsockopt");
}

static void case_timeouts(int cfd, int sfd)
{
	static char big[RING];
	int64_t t0;
	ssize_t r;
	char c;

	set_timeo(cfd, SO_RCVTIMEO, 150);
	t0 = t_ms();
	r = recv(cfd, &c, 1, 0);
	CHECK(r == -1 && errno == EAGAIN, "SO_RCVTIMEO: %zd (%s)", r, strerror(errno));
	CHECK(t_ms() - t0 >= 140, "SO_RCVTIMEO of 150 ms ended after %lld ms",
	      (long long)(t_ms() - t0));
	set_timeo(cfd, SO_RCVTIMEO, 0);

	set_timeo(cfd, SO_SNDTIMEO, 150);
	CHECK(send(cfd, big, sizeof(big), 0) == (ssize_t)sizeof(big), "fill the ring");
	t0 = t_ms();
	r = send(cfd, big, 1, 0);
	CHECK(r == -1 && errno == EAGAIN, "SO_SNDTIMEO: %zd (%s)", r, strerror(errno));
	CHECK(t_ms() - t0 >= 140, "SO_SNDTIMEO of 150 ms ended after %lld ms",
	      (long long)(t_ms() - t0));
	set_timeo(cfd, SO_SNDTIMEO, 0);
	CHECK(recv(sfd, big, sizeof(big), MSG_WAITALL) == (ssize_t)sizeof(big), "drain");
}

static void expect_eagain(int fd, const char *how)
{
	char c;
	ssize_t r = read(fd, &c, 1);

	CHECK(r == -1 && errno == EAGAIN, "%s: read gave %zd (%s)", how, r, strerror(errno));
}

static void case_nonblock(int cfd)
{
	int on = 1, off = 0, fl = fcntl(cfd, F_GETFL);

	CHECK(fcntl(cfd, F_SETFL, fl | O_NONBLOCK) == 0, "F_SETFL");
	expect_eagain(cfd, "fcntl O_NONBLOCK");
	CHECK(fcntl(cfd, F_SETFL, fl) == 0, "F_SETFL back");
	CHECK(ioctl(cfd, FIONBIO, &on) == 0, "FIONBIO on");
	expect_eagain(cfd, "ioctl FIONBIO");
	CHECK(ioctl(cfd, FIONBIO, &off) == 0, "FIONBIO off");
	/* Behind the shim's back: the data path asks the kernel before it sleeps. */
	CHECK(t_raw(SYS_fcntl, cfd, F_SETFL, fl | O_NONBLOCK) == 0, "raw F_SETFL");
	expect_eagain(cfd, "raw fcntl O_NONBLOCK");
	CHECK(fcntl(cfd, F_SETFL, fl) == 0, "F_SETFL back");
	CHECK(!(fcntl(cfd, F_GETFL) & O_NONBLOCK), "still non-blocking");
}

static void case_queues(int cfd, int sfd)
{
	char buf[1234] = { 0 };
	int n = -1;

	CHECK(send(sfd, buf, sizeof(buf), 0) == (ssize_t)sizeof(buf), "send");
	CHECK(ioctl(cfd, FIONREAD, &n) == 0 && n == 1234, "FIONREAD %d", n);
	n = -1;
	CHECK(ioctl(cfd, SIOCINQ, &n) == 0 && n == 1234, "SIOCINQ %d", n);
	n = -1;
	CHECK(ioctl(sfd, SIOCOUTQ, &n) == 0 && n == 1234, "SIOCOUTQ %d", n);
	CHECK(recv(cfd, buf, 1000, 0) == 1000, "recv");
	CHECK(ioctl(cfd, FIONREAD, &n) == 0 && n == 234, "FIONREAD after a read: %d", n);
	CHECK(ioctl(sfd, SIOCOUTQ, &n) == 0 && n == 234, "SIOCOUTQ after a read: %d", n);
	CHECK(recv(cfd, buf, 234, 0) == 234, "recv the rest");
	CHECK(ioctl(cfd, FIONREAD, &n) == 0 && n == 0, "FIONREAD empty: %d", n);
}

int main(int argc, char **argv)
{
	int cfd, sfd;

	(void)argc;
	setenv("FF_TEST_SHM_RING", "262144", 0);	/* read by the fake agent: the cases fill its rings */
	t_setup_swapped_pair(argv, &cfd, &sfd);
	case_timeouts(cfd, sfd);
	case_nonblock(cfd);
	case_queues(cfd, sfd);
	close(cfd);
	close(sfd);
	return t_shim_finish();
}
