/* SPDX-License-Identifier: MIT */
/* Description: a registered listener kept across exec is still known in the new image: what it accepts is swapped (no connector waits for an ACCEPT that never comes), and its close withdraws the registration */
/* Channels: unix host-tcp shm shm-link */
#include "shimtest.h"

/* The exec'd image: accept one connection on the inherited listener. */
static int serve(char **argv)
{
	int lfd = atoi(argv[2]), go = atoi(argv[3]), fd;
	pid_t client = (pid_t)atoi(argv[4]);
	char c;

	CHECK(write(go, "g", 1) == 1, "go");
	fd = accept(lfd, NULL, NULL);
	CHECK(fd >= 0, "accept: %s", strerror(errno));
	CHECK(t_swapped(fd), "the connection accepted after exec was not swapped");
	CHECK(read(fd, &c, 1) == 1 && write(fd, &c, 1) == 1, "echo");
	close(fd);
	t_wait_child(client, "client");
	close(lfd);
	CHECK(t_agent_count("unlisten") == 1, "%d UNLISTEN after closing the carried listener",
	      t_agent_count("unlisten"));
	CHECK(t_agent_count("overlay") == 0, "%d overlay decisions", t_agent_count("overlay"));
	return t_shim_finish();
}

static int client(uint16_t port, int go)
{
	char c;
	int fd;

	if (read(go, &c, 1) != 1)
		return 1;
	fd = t_connect(AF_INET, port);
	CHECK(t_swapped(fd), "client end not swapped");
	CHECK(write(fd, "e", 1) == 1 && read(fd, &c, 1) == 1 && c == 'e', "echo back");
	close(fd);
	return t_exit_code();
}

int main(int argc, char **argv)
{
	char a_lfd[16], a_go[16], a_pid[16];
	int go[2], lfd;
	uint16_t port;
	pid_t pid;

	t_shim_setup(argv, FA_BROKER);
	if (argc == 5 && !strcmp(argv[1], "serve"))
		return serve(argv);
	lfd = t_listen(AF_INET, &port);
	if (pipe(go) || fcntl(lfd, F_SETFD, 0))
		return T_EXIT_FAIL;
	pid = fork();
	if (pid == 0) {
		close(lfd);
		_exit(client(port, go[0]));
	}
	snprintf(a_lfd, sizeof(a_lfd), "%d", lfd);
	snprintf(a_go, sizeof(a_go), "%d", go[1]);
	snprintf(a_pid, sizeof(a_pid), "%d", (int)pid);
	execv("/proc/self/exe", (char *[]){ argv[0], "serve", a_lfd, a_go, a_pid, NULL });
	perror("exec");
	return T_EXIT_FAIL;
}
