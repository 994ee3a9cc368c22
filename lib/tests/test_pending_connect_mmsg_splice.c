/* SPDX-License-Identifier: MIT */
/* Description: recvmmsg, sendmmsg and splice (both directions) called on a non-blocking connect that is still undecided decide it first (EAGAIN while connecting), so their bytes travel on the channel and none is lost on the overlay */
/* Channels: unix host-tcp */
#include "shimtest.h"

#define CASES	3

/* Server (another process): greet, echo 4 bytes; exit status = failures. */
static int server(int lfd)
{
	int bad = 0;

	for (int i = 0; i < CASES; i++) {
		int fd = accept(lfd, NULL, NULL);
		char buf[4];

		bad += !t_swapped(fd);
		if (write(fd, "hello", 5) != 5 || recv(fd, buf, 4, MSG_WAITALL) != 4 ||
		    write(fd, buf, 4) != 4)
			bad++;
		close(fd);
	}
	return bad;
}

/* Non-blocking connect, then nothing that could decide it. */
static int start_connect(uint16_t port)
{
	struct sockaddr_storage ss;
	socklen_t len = t_addr(AF_INET, &ss, port);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	int ret = connect(fd, (void *)&ss, len);

	CHECK(ret == -1 && errno == EINPROGRESS, "connect gave %d (%s)", ret, strerror(errno));
	return fd;
}

/* Blocking read of exactly strlen(want) bytes (the fd made blocking first). */
static void expect(int fd, const char *want, const char *how)
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
	int fd = start_connect(port), r;
	char buf[5];
	struct iovec iov = { .iov_base = buf, .iov_len = 5 };
	struct mmsghdr mm = { .msg_hdr = { .msg_iov = &iov, .msg_iovlen = 1 } };

	RETRY(r, recvmmsg(fd, &mm, 1, MSG_WAITFORONE, NULL));
	CHECK(r == 1 && mm.msg_len >= 1 && !memcmp(buf, "hello", mm.msg_len),
	      "recvmmsg: %d (%s), %u bytes", r, strerror(errno), mm.msg_len);
	CHECK(t_swapped(fd), "recvmmsg: not swapped");
	CHECK(write(fd, "ping", 4) == 4, "recvmmsg: write");
	expect(fd, "hello" + (r == 1 ? mm.msg_len : 0), "recvmmsg: rest of greeting");
	expect(fd, "ping", "recvmmsg");
	close(fd);
}

static void case_sendmmsg(uint16_t port)
{
	int fd = start_connect(port), r;
	char ping[] = "ping";
	struct iovec iov = { .iov_base = ping, .iov_len = 4 };
	struct mmsghdr mm = { .msg_hdr = { .msg_iov = &iov, .msg_iovlen = 1 } };

	RETRY(r, sendmmsg(fd, &mm, 1, MSG_DONTWAIT));
	CHECK(r == 1 && mm.msg_len == 4, "sendmmsg: %d (%s)", r, strerror(errno));
	CHECK(t_swapped(fd), "sendmmsg: not swapped");
	expect(fd, "helloping", "sendmmsg");
	close(fd);
}

static void case_splice(uint16_t port)
{
	int fd = start_connect(port), in[2], out[2];
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

int main(int argc, char **argv)
{
	uint16_t port;
	int lfd;
	pid_t pid;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen(AF_INET, &port);
	pid = fork();
	if (pid == 0)
		_exit(server(lfd));
	case_recvmmsg(port);
	case_sendmmsg(port);
	case_splice(port);
	t_wait_child(pid, "server (status = failures)");
	close(lfd);
	CHECK(t_agent_count("swap") == CASES, "%d swaps", t_agent_count("swap"));
	return t_shim_finish();
}
