/* SPDX-License-Identifier: MIT */
/* Description: an shm connection between two processes parked on TCP while the acceptor's program sleeps in a blocking read on it: the connector parks first (its bell closes), the acceptor's reading thread wakes, finds the connection parked and waits for the socket its parking thread gets next, then moves what it had written and the connector had not read (unread in its ring at the park) into it and reads on from TCP: every byte both ways arrives, in order */
/* Channels: shm */
#include "shimtest.h"

#define N	(256u << 10)

static int server(int ctl)
{
	uint16_t port;
	int lfd = t_listen(AF_INET, &port), fd;

	CHECK(write(ctl, &port, sizeof(port)) == sizeof(port), "port");
	fd = accept(lfd, NULL, NULL);
	CHECK(fd >= 0 && t_swapped(fd), "the accepted connection is on shm");
	CHECK(t_send_stream(fd, N, 2) == 0, "the acceptor's bytes before the park");
	CHECK(t_recv_stream(fd, N, 1) == 0, "the connector's bytes, read from the park on");
	CHECK(t_real_domain(fd) == AF_INET, "the acceptor's fd is of family %d after, not TCP",
	      t_real_domain(fd));
	close(fd);
	close(lfd);
	return t_exit_code();
}

int main(int argc, char **argv)
{
	int ctl, fd;
	pid_t pid;
	uint16_t port;

	(void)argc;
	setenv("FF_TEST_PARK_MS", "300", 1);
	t_shim_setup(argv, FA_BROKER);
	port = t_fork_server(server, &ctl, &pid);
	fd = t_connect(AF_INET, port);
	CHECK(t_swapped(fd), "the connection is on shm");
	for (int i = 0; i < 500 && t_real_domain(fd) != AF_INET; i++)
		usleep(10000);
	CHECK(t_real_domain(fd) == AF_INET, "5 s after the park was due the connector's fd is of family %d",
	      t_real_domain(fd));
	CHECK(t_send_stream(fd, N, 1) == 0, "the connector's bytes after the park");
	CHECK(t_recv_stream(fd, N, 2) == 0, "the acceptor's bytes written before the park");
	t_wait_child(pid, "the acceptor");
	CHECK(t_agent_count("watch parked") == 2, "the agent heard %d ends parked, want 2",
	      t_agent_count("watch parked"));
	close(fd);
	return t_exit_code();
}
