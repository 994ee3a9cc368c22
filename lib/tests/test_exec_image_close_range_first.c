/* SPDX-License-Identifier: MIT */
/* Description: an exec'd image whose very first wrapped call is close_range (or closefrom) over the swapped connection it carried: the library starts first and adopts the connection, so the close is followed as a plain close (the slot cleared), and a socket that then gets the number shows its own names, not the closed connection's overlay names */
/* Channels: unix host-tcp shm */
#include "shimtest.h"

/* The image: close fd first of all, then a unix socket at its number must show AF_UNIX names. */
static int exec_child(int fd, int from)
{
	struct sockaddr_storage ss;
	socklen_t l = sizeof(ss);
	int sp[2];

	if (from)
		closefrom(fd);
	else if (close_range((unsigned)fd, (unsigned)fd, 0))
		return 10;
	/* socketpair is not wrapped: nothing the library does clears the slot for it. */
	do {
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp))
			return 11;
	} while (sp[0] != fd && sp[1] != fd && sp[1] < fd);
	if (sp[0] != fd && sp[1] != fd)
		return 12;
	if (getpeername(fd, (void *)&ss, &l))
		return 13;
	return ss.ss_family == AF_UNIX ? 0 : 14;
}

static void one(char *self, int from)
{
	const char *what = from ? "closefrom" : "close_range";
	char fds[16], fr[4];
	char *args[] = { self, "exec-child", fds, fr, NULL };
	int cfd, sfd, st = -1;
	pid_t pid;

	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(cfd), "%s: not swapped", what);
	fcntl(cfd, F_SETFD, 0);
	snprintf(fds, sizeof(fds), "%d", cfd);
	snprintf(fr, sizeof(fr), "%d", from);
	pid = fork();
	if (pid == 0) {
		execve(self, args, environ);
		_exit(127);
	}
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "%s first in the new image: child status %#x (exit 14: the unix socket at the "
	      "closed number showed the closed connection's overlay peer)", what, st);
	close(cfd);
	close(sfd);
}

int main(int argc, char **argv)
{
	char self[PATH_MAX];

	if (argc == 4 && !strcmp(argv[1], "exec-child"))
		return exec_child(atoi(argv[2]), atoi(argv[3]));
	t_shim_setup(argv, FA_BROKER);
	if (!realpath("/proc/self/exe", self))
		return T_EXIT_FAIL;
	one(self, 0);
	one(self, 1);
	return t_shim_finish();
}
