/* SPDX-License-Identifier: MIT */
/* Description: a server that accepted a connection with accept() (which gave its client a link to the listener) and then accepts through io_uring drops that link when it submits the accept: the client's next connection is not offered over a link nobody would take but decided by the agent at once, overlay listener-not-freeflow, bytes intact both ways */
/* Channels: shm-link */
#include "shimtest.h"
#include "uring.h"

#define N	(64u << 10)

static int client(int go, uint16_t port)
{
	char c;
	int fd;

	fd = t_connect(AF_INET, port);
	CHECK(t_swapped(fd), "the first connection not swapped");
	t_exchange_nth(fd, 0, N, 1);
	close(fd);
	CHECK(read(go, &c, 1) == 1, "the server never said go");
	fd = t_connect(AF_INET, port);
	CHECK(!t_swapped(fd), "the connection io_uring accepts was swapped");
	t_exchange_nth(fd, 1, N, 1);
	close(fd);
	return t_exit_code();
}

int main(int argc, char **argv)
{
	struct io_uring_sqe accept_sqe = { .opcode = IORING_OP_ACCEPT };
	struct uring u;
	int go, lfd, fd, links;
	pid_t pid;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	if (uring_init(&u)) {
		printf("no io_uring here: %s\n", strerror(errno));
		return T_EXIT_SKIP;
	}
	lfd = t_listen_fork(client, &go, &pid);
	fd = accept(lfd, NULL, NULL);
	CHECK(fd >= 0 && t_swapped(fd), "the first connection not swapped");
	t_exchange_nth(fd, 0, N, 0);
	close(fd);
	CHECK(t_agent_count(t_link_grant()) == 1, "%d swaps with a link, not 1",
	      t_agent_count(t_link_grant()));
	links = t_link_fds(&fd, 1);
	CHECK(links == 1, "%d links to the listener", links);

	accept_sqe.fd = lfd;
	uring_push(&u, &accept_sqe);
	CHECK(uring_enter(&u, 1, 0) == 0, "submit the accept");
	CHECK(t_agent_count("unlisten") == 1, "%d UNLISTEN", t_agent_count("unlisten"));
	CHECK(t_link_fds(&fd, 1) == 0, "the listener's link outlived its withdrawal");
	CHECK(write(go, "g", 1) == 1, "go");
	fd = uring_next(&u, NULL);
	CHECK(fd >= 0, "io_uring accept: %s", strerror(-fd));
	if (fd >= 0) {
		CHECK(!t_swapped(fd), "the connection io_uring accepted was swapped");
		t_exchange_nth(fd, 1, N, 0);
		close(fd);
	}
	t_wait_child(pid, "client");
	CHECK(t_agent_count("overlay listener-not-freeflow") == 1,
	      "%d overlay listener-not-freeflow, not 1", t_agent_count("overlay listener-not-freeflow"));
	CHECK(t_agent_count("overlay peer-timeout") == 0, "a connector waited for an ACCEPT");
	close(lfd);
	close(u.fd);
	return t_shim_finish();
}
