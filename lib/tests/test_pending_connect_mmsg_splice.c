/* SPDX-License-Identifier: MIT */
/* Description: recvmmsg, sendmmsg and splice (both directions) called on a non-blocking connect that is still undecided decide it first (EAGAIN while connecting), so their bytes travel on the channel and none is lost on the overlay */
/* Channels: unix host-tcp */
#include "pending_connect.h"

/* Blocking read of exactly strlen(want) bytes (the fd made blocking first). */
static void expect_blocking(int fd, const char *want, const char *how)
{
	size_t n = strlen(want);
	char buf[16];
	ssize_t r;

	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	r = recv(fd, buf, n, MSG_WAITALL);
	CHECK(r == (ssize_t)n && !memcmp(buf, want, n), "%s: read %zd bytes, want \"%s\"", how, r, want);
}

/* Retry a call while it says EAGAIN (the connect is still in progress). */
#define RETRY(r, call) do {						\
	for (int i_ = 0; i_ < 2000; i_++) {				\
		r = (call);						\
		if (!(r < 0 && errno == EAGAIN))			\
			break;						\
		usleep(1000);						\
	}								\
} while (0)

static void case_recvmmsg(uint16_t port)
{
	int fd = pc_start_connect(port), r;
	char buf[5];
	struct iovec iov = { .iov_base = buf, .iov_len = 5 };
	struct mmsghdr mm = { .msg_hdr = { .msg_iov = &iov, .msg_iovlen = 1 } };

	RETRY(r, recvmmsg(fd, &mm, 1, MSG_WAITFORONE, NULL));
	CHECK(r == 1 && mm.msg_len >= 1 && !memcmp(buf, "hello", mm.msg_len),
	      "recvmmsg: %d (%s), %u bytes", r, strerror(errno), mm.msg_len);
	CHECK(t_swapped(fd), "recvmmsg: not swapped");
	CHECK(write(fd, "ping", 4) == 4, "recvmmsg: write");
	expect_blocking(fd, "hello" + (r == 1 ? mm.msg_len : 0), "recvmmsg: rest of greeting");
	expect_blocking(fd, "ping", "recvmmsg");
	close(fd);
}

static void case_sendmmsg(uint16_t port)
{
	int fd = pc_start_connect(port), r;
	char ping[] = "ping";
	struct iovec iov = { .iov_base = ping, .iov_len = 4 };
	struct mmsghdr mm = { .msg_hdr = { .msg_iov = &iov, .msg_iovlen = 1 } };

	RETRY(r, sendmmsg(fd, &mm, 1, MSG_DONTWAIT));
	CHECK(r == 1 && mm.msg_len == 4, "sendmmsg: %d (%s)", r, strerror(errno));
	CHECK(t_swapped(fd), "sendmmsg: not swapped");
	expect_blocking(fd, "helloping", "sendmmsg");
	close(fd);
}

static void case_splice(uint16_t port)
{
	int fd = pc_start_connect(port), in[2], out[2];
	char buf[16];
	ssize_t r;

	CHECK(pipe(in) == 0 && pipe(out) == 0, "pipes");
	CHECK(write(in[1], "ping", 4) == 4, "fill pipe");
	RETRY(r, splice(in[0], NULL, fd, NULL, 4, SPLICE_F_NONBLOCK));
	CHECK(r == 4, "splice into the connection: %zd (%s)", r, strerror(errno));
	CHECK(t_swapped(fd), "splice: not swapped");
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	for (size_t got = 0; got < 9; got += (size_t)r) {
		r = splice(fd, NULL, out[1], NULL, 9 - got, 0);
		if (r <= 0)
			break;
	}
	CHECK(read(out[0], buf, sizeof(buf)) == 9 && !memcmp(buf, "helloping", 9),
	      "splice out of the connection");
	close(in[0]);
	close(in[1]);
	close(out[0]);
	close(out[1]);
	close(fd);
}

static void cases(uint16_t port)
{
	case_recvmmsg(port);
	case_sendmmsg(port);
	case_splice(port);
}

int main(int argc, char **argv)
{
	(void)argc;
	return pc_main(argv, cases);
}
