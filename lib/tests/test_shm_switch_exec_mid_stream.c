/* SPDX-License-Identifier: MIT */
/* Description: exec in the middle of a stream with bytes unread in both directions (still in the rings): the connection moves down to a kernel channel before the exec, the new image and the peer carry on, every byte arrives once and in order both ways, the new image sees the overlay names and options, and the peer adopts at its next call */
/* Channels: shm shm-link */
#include <netinet/tcp.h>

#include "shimtest.h"

#define SENT0	(200u << 10)	/* written by each end before the exec: fits a 256 KiB ring unread */
#define READ0	(50u << 10)	/* of which the exec'ing end has read this much */
#define TOTAL	(8u << 20)	/* each way */
enum { SEED_C = 1, SEED_S = 2 };

/* The peer: SENT0, then (told the exec is done) the rest both ways. Returns failures as a code. */
static int peer(int lfd, int ready, int go)
{
	int fd = accept(lfd, NULL, NULL);
	char c;

	if (fd < 0 || !t_swapped(fd))
		return 2;
	if (t_send_stream_from(fd, 0, SENT0, SEED_S))
		return 3;
	if (write(ready, "r", 1) != 1 || read(go, &c, 1) != 1)
		return 4;
	/* Its next calls find the connection moved down and adopt the kernel channel. */
	if (t_duplex(fd, SENT0, SEED_S, 0, SEED_C, TOTAL))
		return 5;
	if (t_shm_maps() != 0)
		return 6;
	if (read(fd, &c, 1) != 0)
		return 7;	/* the new image closed: EOF */
	return 0;
}

/* The new image: argv = self, "exec-child", fd, go, peer pid, peer name, bell inode. */
static int continued(char **argv)
{
	int fd = atoi(argv[2]), go = atoi(argv[3]), v = 0;
	pid_t pid = (pid_t)atoi(argv[4]);
	socklen_t vl = sizeof(v);
	char p[300];

	t_shim_setup(argv, FA_BROKER);
	CHECK(!getenv("FREEFLOW_EXEC_FDS"), "the description is left in the environment");
	CHECK(t_moved_down(fd, (ino_t)strtoull(argv[6], NULL, 10)), "not moved down to a kernel socket");
	CHECK(t_shm_maps() == 0, "shared memory still mapped after exec");
	t_name_hex(fd, 1, p);
	CHECK(!strcmp(p, argv[5]), "peer name %s, before the exec %s", p, argv[5]);
	CHECK(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &vl) == 0 && v == 1,
	      "TCP_NODELAY set before the exec reads %d", v);
	CHECK(write(go, "g", 1) == 1, "tell the peer");
	CHECK(t_duplex(fd, SENT0, SEED_C, READ0, SEED_S, TOTAL) == 0,
	      "the stream after the exec is not intact");
	close(fd);
	t_wait_child(pid, "peer (status: 2 not shm, 3-5 stream, 6 still mapped, 7 no EOF)");
	CHECK(t_fast_await(1) == 1, "%d fast connections", t_fast_conns());
	return t_shim_finish();
}

int main(int argc, char **argv)
{
	char self[PATH_MAX], fds[16], gos[16], pids[16], ino[32], name[300], c;
	int ready[2], go[2], lfd, fd, one = 1;
	uint16_t port;
	pid_t pid;

	if (argc == 7 && !strcmp(argv[1], "exec-child"))
		return continued(argv);
	t_shim_setup(argv, FA_BROKER);
	if (!realpath("/proc/self/exe", self) || pipe(ready) || pipe(go))
		return T_EXIT_FAIL;
	lfd = t_listen(AF_INET, &port);
	pid = fork();
	if (pid == 0) {
		close(ready[0]);
		close(go[1]);
		_exit(peer(lfd, ready[1], go[0]));
	}
	/* lfd stays open: closing it here would withdraw the listener from the agent. */
	close(ready[1]);
	close(go[0]);
	fd = t_connect(AF_INET, port);
	CHECK(t_swapped(fd), "not on shm");
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	CHECK(t_send_stream_from(fd, 0, SENT0, SEED_C) == 0, "write before the exec");
	CHECK(read(ready[0], &c, 1) == 1, "the peer did not write");
	CHECK(t_recv_stream_from(fd, 0, READ0, SEED_S) == 0, "read before the exec");
	fcntl(fd, F_SETFD, 0);
	snprintf(fds, sizeof(fds), "%d", fd);
	snprintf(gos, sizeof(gos), "%d", go[1]);
	snprintf(pids, sizeof(pids), "%d", (int)pid);
	snprintf(ino, sizeof(ino), "%llu", (unsigned long long)t_ino(fd));
	t_name_hex(fd, 1, name);
	execl(self, self, "exec-child", fds, gos, pids, name, ino, (char *)NULL);
	perror("exec");
	kill(pid, SIGKILL);
	return T_EXIT_FAIL;
}
