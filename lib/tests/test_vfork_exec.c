/* SPDX-License-Identifier: MIT */
/* Description: vfork children that exec (carrying a swapped connection, which shows its overlay names in the new image), fail to exec, or _exit, while another thread keeps making swapped connections, leave the parent's state intact: its connection keeps its names and data, new connections still swap, close still reports CLOSED; so does posix_spawn; on shm vfork first moves the connection down to a kernel channel */
/* Channels: unix host-tcp shm shm-link */
#include <spawn.h>

#include "shimtest.h"

extern char **environ;

#define ROUNDS	20

/* The exec'd image: overlay peer name as the parent saw it, then one byte. */
static int vfork_child(int fd, const char *peer)
{
	char p[300];

	t_name_hex(fd, 1, p);
	if (strcmp(p, peer))
		return 11;
	return write(fd, "v", 1) == 1 ? 0 : 12;
}

/* vfork, then what: 0 exec self, 1 exec a missing file, 2 _exit. Returns the status. */
static int vfork_run(char *const args[], int what)
{
	pid_t pid = vfork();
	int st = -1;

	if (pid == 0) {
		if (what == 0)
			execve(args[0], args, environ);
		else if (what == 1)
			_exit(execve("/nonexistent/ff", args, environ) == -1 && errno == ENOENT ? 0 : 1);
		_exit(what == 2 ? 0 : 127);
	}
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static volatile int stop;

/* Swapped onto the channel; on shm, moved down later by a vfork (or not yet). */
static int on_channel(int fd)
{
	return t_swapped(fd) || (fa_shm() && t_moved_down(fd, 0));
}

/* Meanwhile: connections made, swapped and closed, so the table lock is busy. */
static void *churn(void *p)
{
	int *bad = p;

	while (!stop) {
		int c, s;

		t_pair(AF_INET, &c, &s);
		*bad += !on_channel(c);
		close(c);
		close(s);
	}
	return NULL;
}

static void check_parent(int cfd, int sfd, const char *peer, const char *when)
{
	char p[300], c = 0;

	t_name_hex(cfd, 1, p);
	CHECK(!strcmp(p, peer), "%s: parent's peer name changed", when);
	CHECK(on_channel(cfd), "%s: parent's fd no longer swapped", when);
	CHECK(write(cfd, "p", 1) == 1 && read(sfd, &c, 1) == 1 && c == 'p', "%s: parent data", when);
}

int main(int argc, char **argv)
{
	char self[PATH_MAX], fds[16], peer[300], c;
	char *args[] = { self, "vfork-child", fds, peer, NULL };
	char *tru[] = { "true", NULL };
	int cfd, sfd, bad = 0, r, st;
	pthread_t th;
	pid_t pid;

	if (argc == 4 && !strcmp(argv[1], "vfork-child"))
		return vfork_child(atoi(argv[2]), argv[3]);
	t_shim_setup(argv, FA_BROKER);
	if (!realpath("/proc/self/exe", self))
		return T_EXIT_FAIL;
	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(cfd), "not swapped");
	fcntl(cfd, F_SETFD, 0);
	snprintf(fds, sizeof(fds), "%d", cfd);
	t_name_hex(cfd, 1, peer);
	pthread_create(&th, NULL, churn, &bad);
	for (int i = 0; i < ROUNDS; i++) {
		r = vfork_run(args, 0);
		CHECK(r == 0, "round %d: exec'd child exited %d (11 peer name, 12 data)", i, r);
		CHECK(r != 0 || (read(sfd, &c, 1) == 1 && c == 'v'), "round %d: data from child", i);
		CHECK((r = vfork_run(args, 1)) == 0, "round %d: failed-exec child exited %d", i, r);
		CHECK((r = vfork_run(args, 2)) == 0, "round %d: _exit child exited %d", i, r);
	}
	stop = 1;
	pthread_join(th, NULL);
	CHECK(bad == 0, "%d connections made during the vforks were not swapped", bad);
	check_parent(cfd, sfd, peer, "after vfork");
	CHECK(posix_spawnp(&pid, "true", NULL, NULL, tru, environ) == 0, "posix_spawnp true");
	waitpid(pid, &st, 0);
	check_parent(cfd, sfd, peer, "after posix_spawn");
	{
		int c2, s2;

		t_pair(AF_INET, &c2, &s2);
		CHECK(t_swapped(c2) && t_swapped(s2), "new connection after vfork not swapped");
		close(c2);
		close(s2);
	}
	/* CLOSED goes out without waiting: first let the other pairs' (all but one swap) arrive. */
	r = t_agent_await("closed", 2 * (t_agent_count("swap") - 1));
	close(cfd);
	close(sfd);
	CHECK(t_agent_await("closed", r + 2) == r + 2, "%d CLOSED for the vforking parent's connection",
	      t_agent_count("closed") - r);
	return t_shim_finish();
}
