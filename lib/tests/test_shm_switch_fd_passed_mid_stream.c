/* SPDX-License-Identifier: MIT */
/* Description: an shm connection's fd passed with SCM_RIGHTS (sendmsg, sendmmsg) to another process in the middle of a stream, with bytes unread in both directions: it moves down first, the receiving process carries the stream on, every byte arrives once and in order both ways, and the peer sees EOF when the receiver closes it */
/* Channels: shm shm-link */
#include "shimtest.h"

#define SENT0	(200u << 10)
#define READ0	(70u << 10)
#define TOTAL	(4u << 20)
#define ROUNDS	2		/* sendmsg, then sendmmsg */
enum { SEED_C = 1, SEED_S = 2 };

/* The peer, one connection per round; returns failures as a code. */
static int peer(int lfd, int ready)
{
	for (int i = 0; i < ROUNDS; i++) {
		int fd, r = t_mid_stream_peer(lfd, ready, SENT0, SEED_S, SEED_C, TOTAL, &fd);
		char c;

		if (r)
			return r;
		if (read(fd, &c, 1) != 0)
			return 5;
		close(fd);
	}
	return 0;
}

/* The receiving process: carries each passed connection on, reports a status byte. */
static int receiver(int pass)
{
	for (int i = 0; i < ROUNDS; i++) {
		int fd = t_recv_fd(pass);
		char st = 0;

		if (fd < 0)
			st = 1;
		else if (t_real_domain(fd) != AF_UNIX || t_shm_maps() != 0)
			st = 2;
		else if (t_duplex(fd, SENT0, SEED_C, READ0, SEED_S, TOTAL))
			st = 3;
		close(fd);
		if (write(pass, &st, 1) != 1)
			return 1;
	}
	return 0;
}

static void pass_fd(int pass, int fd, int mmsg)
{
	struct mmsghdr m = { 0 };
	struct t_fds_msg f;

	CHECK(t_fds_msg(&f, "f", 1, &fd, 1) == 0, "one fd to pass");
	m.msg_hdr = f.mh;
	if (mmsg)
		CHECK(sendmmsg(pass, &m, 1, 0) == 1, "sendmmsg: %s", strerror(errno));
	else
		CHECK(sendmsg(pass, &m.msg_hdr, 0) == 1, "sendmsg: %s", strerror(errno));
}

int main(int argc, char **argv)
{
	int ready, pass[2], lfd;
	pid_t server, recv_pid;
	uint16_t port;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	server = t_fork_peer(peer, &lfd, &port, &ready);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pass))
		return T_EXIT_FAIL;
	recv_pid = fork();
	if (recv_pid == 0) {
		close(pass[0]);
		_exit(receiver(pass[1]));
	}
	close(pass[1]);
	for (int i = 0; i < ROUNDS; i++) {
		int fd = t_connect(AF_INET, port);
		ino_t bell = t_ino(fd);
		char c, st = -1;

		CHECK(t_swapped(fd), "round %d: not on shm", i);
		CHECK(t_send_stream_from(fd, 0, SENT0, SEED_C) == 0, "round %d: write", i);
		CHECK(read(ready, &c, 1) == 1, "round %d: the peer did not write", i);
		CHECK(t_recv_stream_from(fd, 0, READ0, SEED_S) == 0, "round %d: read", i);
		pass_fd(pass[0], fd, i == 1);
		CHECK(t_moved_down(fd, bell), "round %d: not moved down before passing", i);
		close(fd);
		CHECK(read(pass[0], &st, 1) == 1 && st == 0,
		      "round %d: receiver status %d (1 no fd, 2 not a kernel socket, 3 stream)", i, st);
	}
	t_wait_child(recv_pid, "receiver");
	t_wait_child(server, "peer (status: 2 not shm, 3-4 stream, 5 no EOF)");
	close(lfd);
	return t_shim_finish();
}
