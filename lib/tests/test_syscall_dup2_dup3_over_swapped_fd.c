/* SPDX-License-Identifier: MIT */
/* Description: syscall(SYS_dup2) and syscall(SYS_dup3) of a file over a swapped socket: the file's bytes read back intact at that number, the agent hears CLOSED, the peer reads EOF; and syscall(SYS_dup) of a swapped socket is the same connection */
/* Channels: unix host-tcp shm */
#include "shimtest.h"

/* Replace sfd by a 1 MiB file with dup(how); its bytes must read back at sfd. */
static void file_over(const char *route, long nr, int flags)
{
	char p[PATH_MAX + 16], c;
	int cfd, sfd, before, f, w;

	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(sfd), "%s: not swapped", route);
	t_path(p, sizeof(p), "over");
	w = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(w >= 0 && t_put_stream(w, 0, 1 << 20, 7, t_io_write, NULL) == 0 && close(w) == 0,
	      "file");
	f = open(p, O_RDONLY | O_CLOEXEC);
	unlink(p);
	before = t_agent_count("closed");
	CHECK((nr == SYS_dup3 ? syscall(nr, f, sfd, flags) : syscall(nr, f, sfd)) == sfd, "%s: %s",
	      route, strerror(errno));
	close(f);
	CHECK(t_agent_await("closed", before + 1) == before + 1,
	      "%s: the agent was not told CLOSED for the replaced connection", route);
	CHECK(t_get_stream(sfd, 0, 1 << 20, 7, t_io_read, NULL) == 0,
	      "%s: the file's bytes did not come back at the swapped socket's number", route);
	close(sfd);
	CHECK(recv(cfd, &c, 1, 0) == 0, "%s: the peer did not read the end of the stream", route);
	close(cfd);
	t_agent_await("closed", before + 2);	/* the peer's, before the next count */
}

static void dup_is_same(void)
{
	int cfd, sfd, d;

	t_pair(AF_INET, &cfd, &sfd);
	d = (int)syscall(SYS_dup, sfd);
	CHECK(d >= 0, "syscall(SYS_dup): %s", strerror(errno));
	close(sfd);
	CHECK(t_put_stream(cfd, 0, 65536, 3, t_io_write, NULL) == 0, "send");
	CHECK(t_get_stream(d, 0, 65536, 3, t_io_read, NULL) == 0,
	      "the syscall(SYS_dup) copy did not read the connection's bytes");
	close(d);
	close(cfd);
}

int main(int argc, char **argv)
{
	(void)argc;
	t_shim_setup(argv, FA_BROKER);
#ifdef SYS_dup2
	file_over("syscall(SYS_dup2)", SYS_dup2, 0);
#endif
	file_over("syscall(SYS_dup3)", SYS_dup3, O_CLOEXEC);
	dup_is_same();
	return t_shim_finish();
}
