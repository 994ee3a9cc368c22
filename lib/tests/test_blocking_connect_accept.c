/* SPDX-License-Identifier: MIT */
/* Description: blocking connect + accept between two preloaded processes moves the connection to the agent's channel at the same fd numbers, and 4 MiB each way arrive intact */
/* Channels: unix host-tcp shm shm-link */
#include "shimtest.h"

#define N	(4u << 20)

static int client(uint16_t port)
{
	int fd = t_connect(AF_INET, port);

	CHECK(t_swapped(fd), "client fd not swapped (kernel family %d)", t_real_domain(fd));
	CHECK(fcntl(fd, F_GETFD) == FD_CLOEXEC, "FD_CLOEXEC lost");
	CHECK(!(fcntl(fd, F_GETFL) & O_NONBLOCK), "became non-blocking");
	CHECK(t_send_stream(fd, N, 1) == 0, "client send");
	CHECK(t_recv_stream(fd, N, 2) == 0, "client receive: data lost or corrupted");
	close(fd);
	return t_exit_code();
}

int main(int argc, char **argv)
{
	int lfd, fd;
	pid_t pid;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	lfd = t_fork_client(client, &pid);
	fd = accept(lfd, NULL, NULL);
	CHECK(fd >= 0, "accept: %s", strerror(errno));
	CHECK(t_swapped(fd), "server fd not swapped (kernel family %d)", t_real_domain(fd));
	CHECK(t_recv_stream(fd, N, 1) == 0, "server receive: data lost or corrupted");
	CHECK(t_send_stream(fd, N, 2) == 0, "server send");
	t_wait_child(pid, "client");
	close(fd);
	close(lfd);
	/* The forked client inherited the listener: its session registered it as its own too. */
	CHECK(t_agent_count("listen") == 2, "%d LISTEN", t_agent_count("listen"));
	CHECK(t_fast_await(1) == 1, "%d fast connections", t_fast_conns());
	CHECK(t_agent_count("overlay") == 0, "%d overlay decisions", t_agent_count("overlay"));
	CHECK(t_agent_await("closed", 2) == 2, "%d CLOSED", t_agent_count("closed"));
	CHECK(t_agent_count("unlisten") == 1, "%d UNLISTEN", t_agent_count("unlisten"));
	return t_shim_finish();
}
