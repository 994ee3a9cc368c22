/* SPDX-License-Identifier: MIT */
/* Description: sendto/sendmsg/sendmmsg naming the peer on a connected swapped socket succeed as on TCP (sockperf does this), and recvfrom/recvmsg/recvmmsg report no source address (length 0, buffer untouched), exactly what kernel TCP does on an overlay pair */
/* Channels: unix host-tcp shm shm-link */
#include <sys/syscall.h>

#include "shimtest.h"

#define MSG	"0123456789abcdef"

/* An overlay TCP pair: the listener is hidden from the shim, so the agent never offers a channel. */
static void tcp_pair(int *cfd, int *sfd)
{
	struct sockaddr_storage ss;
	socklen_t len = t_addr(AF_INET, &ss, 0);
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct t_conn_arg a = { .family = AF_INET };
	pthread_t th;

	if (lfd < 0 || bind(lfd, (void *)&ss, len) || t_raw(SYS_listen, lfd, 4) ||
	    getsockname(lfd, (void *)&ss, &len)) {
		perror("overlay listener");
		exit(T_EXIT_FAIL);
	}
	a.port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	pthread_create(&th, NULL, t_connect_thread, &a);
	*sfd = accept(lfd, NULL, NULL);
	pthread_join(th, NULL);
	*cfd = a.fd;
	close(lfd);
}

static int untouched(const struct sockaddr_storage *ss)
{
	for (size_t i = 0; i < sizeof(*ss); i++)
		if (((const uint8_t *)ss)[i] != 0xa5)
			return 0;
	return 1;
}

/* A send that failed: fail the test without waiting for bytes that will not come. */
#define SENT(call, n, what) do {					\
	if ((call) != (n)) {						\
		CHECK(0, "%s: %s: %s", what, #call, strerror(errno));	\
		return;							\
	}								\
} while (0)

/* Sends 16 bytes from `from` to `to` with the peer's address, each way of naming it. */
static void one_way(int from, int to, const char *what)
{
	struct sockaddr_storage peer, src;
	socklen_t pl = sizeof(peer), sl = sizeof(src);
	char buf[2][16];
	struct iovec iov[2] = { { buf[0], 16 }, { buf[1], 16 } };
	struct iovec out = { (void *)MSG, 16 };
	struct msghdr mh = { .msg_name = &peer, .msg_iov = &out, .msg_iovlen = 1 };
	struct mmsghdr mm[2] = { { .msg_hdr = mh }, { .msg_hdr = mh } };
	struct mmsghdr rm[2];

	CHECK(getpeername(from, (void *)&peer, &pl) == 0, "%s: getpeername", what);
	mh.msg_namelen = pl;
	mm[0].msg_hdr.msg_namelen = mm[1].msg_hdr.msg_namelen = pl;

	SENT(sendto(from, MSG, 16, 0, (void *)&peer, pl), 16, what);
	memset(&src, 0xa5, sizeof(src));
	CHECK(recvfrom(to, buf[0], 16, MSG_WAITALL, (void *)&src, &sl) == 16 &&
	      !memcmp(buf[0], MSG, 16), "%s: recvfrom: %s", what, strerror(errno));
	CHECK(sl == 0 && untouched(&src), "%s: recvfrom reported a source (len %u, family %d)",
	      what, sl, src.ss_family);

	SENT(sendmsg(from, &mh, 0), 16, what);
	memset(&src, 0xa5, sizeof(src));
	mh = (struct msghdr){ .msg_name = &src, .msg_namelen = sizeof(src), .msg_iov = iov,
			      .msg_iovlen = 1 };
	CHECK(recvmsg(to, &mh, MSG_WAITALL) == 16 && !memcmp(buf[0], MSG, 16),
	      "%s: recvmsg: %s", what, strerror(errno));
	CHECK(mh.msg_namelen == 0 && untouched(&src), "%s: recvmsg reported a source (len %u)",
	      what, mh.msg_namelen);

	SENT(sendmmsg(from, mm, 2, 0), 2, what);
	CHECK(mm[0].msg_len == 16 && mm[1].msg_len == 16, "%s: sendmmsg lengths", what);
	memset(&src, 0xa5, sizeof(src));
	for (int i = 0; i < 2; i++)
		rm[i].msg_hdr = (struct msghdr){ .msg_name = &src, .msg_namelen = sizeof(src),
						 .msg_iov = &iov[i], .msg_iovlen = 1 };
	CHECK(recvmmsg(to, rm, 2, MSG_WAITALL, NULL) == 2, "%s: recvmmsg: %s", what,
	      strerror(errno));
	CHECK(rm[0].msg_len == 16 && rm[1].msg_len == 16 && !memcmp(buf[0], MSG, 16) &&
	      !memcmp(buf[1], MSG, 16), "%s: recvmmsg data", what);
	CHECK(rm[0].msg_hdr.msg_namelen == 0 && rm[1].msg_hdr.msg_namelen == 0 && untouched(&src),
	      "%s: recvmmsg reported a source", what);
}

static void check(int cfd, int sfd, const char *what)
{
	one_way(cfd, sfd, what);
	one_way(sfd, cfd, what);
	close(cfd);
	close(sfd);
}

int main(int argc, char **argv)
{
	int cfd, sfd;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	tcp_pair(&cfd, &sfd);
	CHECK(!t_swapped(cfd) && !t_swapped(sfd), "the reference pair was swapped");
	check(cfd, sfd, "kernel TCP");
	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(cfd) && t_swapped(sfd), "IPv4 pair not swapped");
	check(cfd, sfd, "swapped IPv4");
	t_pair(AF_INET6, &cfd, &sfd);
	CHECK(t_swapped(cfd) && t_swapped(sfd), "IPv6 pair not swapped");
	check(cfd, sfd, "swapped IPv6");
	return t_shim_finish();
}
