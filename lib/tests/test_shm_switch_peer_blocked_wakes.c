/* SPDX-License-Identifier: MIT */
/* Description: a peer asleep in read, poll or epoll_wait on an shm connection when the other end moves down wakes on the switch message and adopts the kernel channel at once (it lets go of its shared memory before any byte follows: unmapped, or only kept by its link), then gets the bytes written there; its epoll registration follows the move */
/* Channels: shm shm-link */
#include "shimtest.h"

enum how { IN_READ, IN_POLL, IN_EPOLL, HOWS };

static const char *const how_name[HOWS] = { "read", "poll", "epoll_wait" };

/* Wait as how says until fd is readable, then read one byte (skipping empty wake-ups). */
static int wait_and_read(int fd, enum how how, char *c)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 7 };
	int ep = -1, r = -1;

	if (how == IN_EPOLL && ((ep = epoll_create1(0)) < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev)))
		return -1;
	for (int i = 0; i < 100; i++) {
		if (how == IN_POLL && poll(&p, 1, 10000) != 1)
			break;
		if (how == IN_EPOLL && (epoll_wait(ep, &ev, 1, 10000) != 1 || ev.data.u64 != 7))
			break;
		r = (int)recv(fd, c, 1, how == IN_READ ? 0 : MSG_DONTWAIT);
		if (r >= 0 || errno != EAGAIN)
			break;
	}
	if (ep >= 0)
		close(ep);
	return r;
}

/* The peer: for each way of waiting, a connection on which it waits for one byte. */
static int peer(int lfd, int ready)
{
	for (int how = 0; how < HOWS; how++) {
		int fd = accept(lfd, NULL, NULL);
		char c = 0;

		if (fd < 0 || !t_swapped(fd) || write(ready, "r", 1) != 1)
			return 2;
		if (wait_and_read(fd, (enum how)how, &c) != 1 || c != 'x')
			return 3 + how;
		close(fd);
	}
	return 0;
}

int main(int argc, char **argv)
{
	int ready, lfd;
	uint16_t port;
	pid_t pid;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	pid = t_fork_peer(peer, &lfd, &port, &ready);
	for (int how = 0; how < HOWS; how++) {
		int fd = t_connect(AF_INET, port), maps = -1;
		int64_t end;
		pid_t child;
		char c;

		CHECK(t_swapped(fd), "%s: not on shm", how_name[how]);
		CHECK(read(ready, &c, 1) == 1, "%s: the peer is not there", how_name[how]);
		usleep(100000);		/* past its spin: asleep in the kernel */
		child = fork();		/* moves this end down */
		if (child == 0)
			_exit(0);
		waitpid(child, NULL, 0);
		/*
		 * The peer unmaps an agent's channel; one a link keeps stays mapped
		 * at both ends, and the peer's done word says it let go.
		 */
		end = t_ms() + 2000;
		while ((maps = t_shm_maps_of(pid, NULL) - fa_link() * t_kept_maps_of(pid) +
			       t_kept_channels_held()) > 0 && t_ms() < end)
			usleep(1000);
		CHECK(maps == 0, "%s: the peer did not adopt while asleep (%d channels held)",
		      how_name[how], maps);
		CHECK(write(fd, "x", 1) == 1, "%s: write after the move", how_name[how]);
		close(fd);
	}
	t_wait_child(pid, "peer (status: 2 setup, 3 read, 4 poll, 5 epoll_wait)");
	close(lfd);
	return t_shim_finish();
}
