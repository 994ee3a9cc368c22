/* SPDX-License-Identifier: MIT */
/* Description: sendfile from a file into a swapped connection delivers the file; a posix_spawn'ed child inherits the connection (no FD_CLOEXEC) and writes on it; on shm the connection first moves down to a kernel channel for the child */
/* Channels: unix host-tcp shm shm-link */
#include <spawn.h>
#include <sys/sendfile.h>

#include "shimtest.h"

extern char **environ;

#define FILE_LEN	(256 * 1024)

static void case_sendfile(int cfd, int sfd)
{
	char path[PATH_MAX + 16];
	off_t off = 0;
	int f;

	t_path(path, sizeof(path), "sendfile.dat");
	f = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CHECK(f >= 0 && t_send_stream(f, FILE_LEN, 7) == 0, "write the file");
	unlink(path);
	while (off < FILE_LEN) {
		/* The reader runs in a thread: the file is bigger than the socket buffer. */
		ssize_t n = sendfile(cfd, f, &off, FILE_LEN - (size_t)off);

		if (n <= 0)
			break;
	}
	CHECK(off == FILE_LEN, "sendfile sent %lld bytes", (long long)off);
	close(f);
	(void)sfd;
}

static void *reader(void *p)
{
	return (void *)(intptr_t)t_recv_stream(*(int *)p, FILE_LEN, 7);
}

int main(int argc, char **argv)
{
	char arg[16], buf[8];
	int cfd, sfd, status = -1;
	char *args[4];
	pthread_t th;
	void *rr;
	pid_t pid;

	if (argc == 3 && !strcmp(argv[1], "spawn-child"))
		return write(atoi(argv[2]), "spwn", 4) == 4 ? 0 : 1;
	t_shim_setup(argv, FA_BROKER);
	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(cfd), "not swapped");
	pthread_create(&th, NULL, reader, &sfd);
	case_sendfile(cfd, sfd);
	pthread_join(th, &rr);
	CHECK(rr == NULL, "the peer got a different file");
	fcntl(cfd, F_SETFD, 0);
	snprintf(arg, sizeof(arg), "%d", cfd);
	args[0] = "self";
	args[1] = "spawn-child";
	args[2] = arg;
	args[3] = NULL;
	CHECK(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args, environ) == 0, "posix_spawn");
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "spawned child status %#x", status);
	CHECK(recv(sfd, buf, 4, MSG_WAITALL) == 4 && !memcmp(buf, "spwn", 4), "data from the spawned child");
	close(cfd);
	close(sfd);
	return t_shim_finish();
}
