/* SPDX-License-Identifier: MIT */
/* Description: posix_spawn in the middle of a stream, with bytes unread in both directions: the connection moves down first, the spawned child (the fd also dup2'ed to its stdin by a file action) carries the stream on, every byte arrives once and in order both ways, and the parent keeps using the connection after the child is done */
/* Channels: shm shm-link */
#include <spawn.h>

#include "shimtest.h"

extern char **environ;

#define SENT0	(200u << 10)
#define READ0	(30u << 10)
#define TOTAL	(4u << 20)
enum { SEED_C = 1, SEED_S = 2 };

static int peer(int lfd, int ready)
{
	char c = 0;
	int fd, r;

	/* Adopts at its first read, while the parent waits for its child. */
	r = t_mid_stream_peer(lfd, ready, SENT0, SEED_S, SEED_C, TOTAL, &fd);
	if (r)
		return r;
	if (read(fd, &c, 1) != 1 || c != 'p' || write(fd, "q", 1) != 1)
		return 5;
	return read(fd, &c, 1) == 0 ? 0 : 6;
}

/* The spawned image: the stream goes on at fd 0 (a copy of the connection). */
static int spawned(void)
{
	struct sockaddr_storage ss;
	socklen_t l = sizeof(ss);

	if (getpeername(0, (void *)&ss, &l) || ss.ss_family != AF_INET)
		return 10;	/* not described: the channel's own names */
	if (t_shm_maps() != 0)
		return 11;
	return t_duplex(0, SENT0, SEED_C, READ0, SEED_S, TOTAL) ? 12 : 0;
}

int main(int argc, char **argv)
{
	char *args[] = { "self", "spawned", NULL };
	posix_spawn_file_actions_t fa;
	int ready, lfd, fd, st = -1;
	uint16_t port;
	ino_t bell;
	pid_t pid, child;
	char c;

	if (argc == 2 && !strcmp(argv[1], "spawned"))
		return spawned();
	t_shim_setup(argv, FA_BROKER);
	pid = t_fork_peer(peer, &lfd, &port, &ready);
	fd = t_connect(AF_INET, port);
	CHECK(t_swapped(fd), "not on shm");
	bell = t_ino(fd);
	CHECK(t_send_stream_from(fd, 0, SENT0, SEED_C) == 0, "write before the spawn");
	CHECK(read(ready, &c, 1) == 1, "the peer did not write");
	CHECK(t_recv_stream_from(fd, 0, READ0, SEED_S) == 0, "read before the spawn");
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fd, 0);
	CHECK(posix_spawn(&child, "/proc/self/exe", &fa, NULL, args, environ) == 0, "posix_spawn");
	posix_spawn_file_actions_destroy(&fa);
	CHECK(t_moved_down(fd, bell), "the parent's fd was not moved down");
	waitpid(child, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "spawned child status %#x (10 names, 11 still mapped, 12 stream)", st);
	CHECK(write(fd, "p", 1) == 1 && read(fd, &c, 1) == 1 && c == 'q',
	      "the parent's exchange after the child");
	close(fd);
	t_wait_child(pid, "peer (status: 2 not shm, 3-4 stream, 5 exchange, 6 no EOF)");
	close(lfd);
	CHECK(t_fast_await(1) == 1, "%d fast connections", t_fast_conns());
	return t_shim_finish();
}
