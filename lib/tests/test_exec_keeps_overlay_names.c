/* SPDX-License-Identifier: MIT */
/* Description: a swapped connection kept across execve/execv/execvp/execle/execlp/fexecve/posix_spawn (also dup2'ed to stdin by a spawn file action) still shows its overlay names to the new image, data flows both ways, the carrying variable is gone from its environment, and a forged one is ignored; on shm the connection first moves down to a kernel channel */
/* Channels: unix host-tcp shm shm-link */
#include <spawn.h>

#include "shimtest.h"

extern char **environ;

enum how { EXECVE, EXECV, EXECVP, EXECLE, EXECLP, FEXECVE, SPAWN, SPAWN_STDIN, HOWS };

static const char *const how_name[HOWS] = {
	"execve", "execv", "execvp", "execle", "execlp", "fexecve", "posix_spawn",
	"posix_spawn dup2 to stdin",
};

/* The new image: names as the old one saw them, then one byte each way. */
static int exec_child(int fd, const char *peer, const char *local)
{
	char p[300], l[300], c = 0;

	if (getenv("FREEFLOW_EXEC_FDS"))
		return 10;
	t_name_hex(fd, 1, p);
	t_name_hex(fd, 0, l);
	if (strcmp(p, peer))
		return 11;
	if (strcmp(l, local))
		return 12;
	/* On shm, the connection moved down to a kernel channel before the exec. */
	if (fa_shm() ? !t_moved_down(fd, 0) || t_shm_maps() != 0 : !t_swapped(fd))
		return 13;
	if (write(fd, "e", 1) != 1 || read(fd, &c, 1) != 1 || c != 'r')
		return 14;
	return 0;
}

/* Run self as the exec child, the way how says; returns its exit status. */
static int run_child(char *self, enum how how, int fd)
{
	char fds[16], peer[300], local[300];
	char *args[] = { self, "exec-child", fds, peer, local, NULL };
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int st = -1;

	snprintf(fds, sizeof(fds), "%d", how == SPAWN_STDIN ? 0 : fd);
	t_name_hex(fd, 1, peer);
	t_name_hex(fd, 0, local);
	if (how == SPAWN || how == SPAWN_STDIN) {
		posix_spawn_file_actions_init(&fa);
		posix_spawn_file_actions_adddup2(&fa, fd, 0);
		if (posix_spawn(&pid, self, how == SPAWN_STDIN ? &fa : NULL, NULL, args, environ))
			return -1;
		posix_spawn_file_actions_destroy(&fa);
	} else if ((pid = fork()) == 0) {
		int efd = open(self, O_RDONLY | O_CLOEXEC);

		switch (how) {
		case EXECVE:	execve(self, args, environ); break;
		case EXECV:	execv(self, args); break;
		case EXECVP:	execvp(self, args); break;
		case EXECLE:	execle(self, self, args[1], fds, peer, local, (char *)NULL, environ); break;
		case EXECLP:	execlp(self, self, args[1], fds, peer, local, (char *)NULL); break;
		case FEXECVE:	fexecve(efd, args, environ); break;
		default:	break;
		}
		_exit(127);
	}
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The peer's half of the child's exchange: one byte in, one out. */
static void *peer_side(void *p)
{
	int fd = *(int *)p;
	char c = 0;

	if (read(fd, &c, 1) != 1 || c != 'e' || write(fd, "r", 1) != 1)
		return (void *)1;
	return NULL;
}

static void one(char *self, enum how how)
{
	int cfd, sfd, r;
	pthread_t th;
	void *pr;

	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(cfd), "%s: not swapped", how_name[how]);
	/* posix_spawn with file actions carries CLOEXEC fds too: the dup2 clears it on 0. */
	if (how != SPAWN_STDIN)
		fcntl(cfd, F_SETFD, 0);
	pthread_create(&th, NULL, peer_side, &sfd);
	r = run_child(self, how, cfd);
	CHECK(r == 0, "%s: child exited %d (10 variable left, 11 peer name, 12 local name, "
	      "13 not swapped, 14 data)", how_name[how], r);
	if (r != 0)
		shutdown(sfd, SHUT_RDWR);	/* release the peer thread */
	pthread_join(th, &pr);
	CHECK(r != 0 || pr == NULL, "%s: peer side of the exchange failed", how_name[how]);
	close(cfd);
	close(sfd);
}

/* A variable naming a socket that is not there (wrong inode): nothing is adopted. */
static void forged(char *self)
{
	int cfd, sfd, st = -1;
	pid_t pid;

	t_pair(AF_INET, &cfd, &sfd);
	/* Nothing to carry, so exec passes the environment on as given. */
	fcntl(cfd, F_SETFD, FD_CLOEXEC);
	fcntl(sfd, F_SETFD, FD_CLOEXEC);
	pid = fork();
	if (pid == 0) {
		/* Some plain socket at a known fd, and an entry naming it with a wrong inode. */
		int s = socket(AF_INET, SOCK_STREAM, 0);
		char fds[16], var[160], pre[2 * PATH_MAX + 16];
		char *args[] = { self, "forged-child", fds, NULL };
		char *env[] = { var, pre, NULL };

		snprintf(fds, sizeof(fds), "%d", s);
		snprintf(var, sizeof(var), "FREEFLOW_EXEC_FDS=%d,1,2,02000000000000000000000000000000,"
			 "02000000000000000000000000000000,", s);
		snprintf(pre, sizeof(pre), "LD_PRELOAD=%s", getenv("LD_PRELOAD"));
		execve(self, args, env);
		_exit(127);
	}
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "forged description: child status %#x", st);
	close(cfd);
	close(sfd);
}

/* The forged entry named fd s, a plain unconnected TCP socket: it must stay one. */
static int forged_child(int s)
{
	struct sockaddr_storage ss;
	socklen_t l = sizeof(ss);

	if (getpeername(s, (void *)&ss, &l) == 0)
		return 2;	/* adopted: it claims a peer */
	return errno == ENOTCONN ? 0 : 3;
}

int main(int argc, char **argv)
{
	char self[PATH_MAX];

	if (argc == 5 && !strcmp(argv[1], "exec-child"))
		return exec_child(atoi(argv[2]), argv[3], argv[4]);
	if (argc == 3 && !strcmp(argv[1], "forged-child"))
		return forged_child(atoi(argv[2]));
	t_shim_setup(argv, FA_BROKER);
	if (!realpath("/proc/self/exe", self))
		return T_EXIT_FAIL;
	for (int how = 0; how < HOWS; how++)
		one(self, (enum how)how);
	forged(self);
	return t_shim_finish();
}
