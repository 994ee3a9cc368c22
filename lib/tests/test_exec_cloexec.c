/* SPDX-License-Identifier: MIT */
/* Description: exec keeps a swapped connection without FD_CLOEXEC (the new image, preloaded again, writes on it) and closes one with FD_CLOEXEC (the peer sees EOF); on shm the kept connection first moves down to a kernel channel */
/* Channels: unix host-tcp shm shm-link */
#include "shimtest.h"

/* Run as "<self> exec-child <fd>": write on the inherited fd, report whether it is open. */
static int exec_child(int fd)
{
	if (fcntl(fd, F_GETFD) < 0)
		return 3;	/* closed by exec */
	if (!getenv("LD_PRELOAD") || !strstr(getenv("LD_PRELOAD"), "libfreeflow"))
		return 4;
	return write(fd, "exec", 4) == 4 ? 0 : 5;
}

static int run_exec(char *self, int fd)
{
	char arg[16];
	int status;
	pid_t pid;

	snprintf(arg, sizeof(arg), "%d", fd);
	pid = fork();
	if (pid == 0) {
		execl(self, self, "exec-child", arg, (char *)NULL);
		_exit(127);
	}
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int main(int argc, char **argv)
{
	char buf[8], self[PATH_MAX];
	int cfd, sfd, r;

	if (argc == 3 && !strcmp(argv[1], "exec-child"))
		return exec_child(atoi(argv[2]));
	t_shim_setup(argv, FA_BROKER);
	if (!realpath("/proc/self/exe", self))
		return T_EXIT_FAIL;
	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(cfd), "not swapped");
	CHECK(fcntl(cfd, F_SETFD, 0) == 0, "clear FD_CLOEXEC");
	r = run_exec(self, cfd);
	CHECK(r == 0, "exec child without CLOEXEC exited %d", r);
	CHECK(recv(sfd, buf, 4, MSG_WAITALL) == 4 && !memcmp(buf, "exec", 4), "data from the exec'd image");
	CHECK(fcntl(cfd, F_SETFD, FD_CLOEXEC) == 0, "set FD_CLOEXEC");
	r = run_exec(self, cfd);
	CHECK(r == 3, "exec child with CLOEXEC exited %d (3 = fd closed)", r);
	close(cfd);
	CHECK(read(sfd, buf, sizeof(buf)) == 0, "no EOF: a copy survived exec with CLOEXEC");
	close(sfd);
	return t_shim_finish();
}
