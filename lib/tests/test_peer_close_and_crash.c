/* SPDX-License-Identifier: MIT */
/* Description: on a swapped connection, peer close gives EOF (and POLLIN|POLLRDHUP), and a peer killed with SIGKILL gives EOF or ECONNRESET within a second, never a hang */
/* Channels: unix host-tcp shm shm-link */
#include "shimtest.h"

static void case_close(void)
{
	struct pollfd p;
	char buf[8];
	int cfd, sfd;

	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(cfd), "not swapped");
	CHECK(write(sfd, "bye", 3) == 3, "write");
	close(sfd);
	p = (struct pollfd){ .fd = cfd, .events = POLLIN | POLLRDHUP };
	CHECK(poll(&p, 1, 1000) == 1 && (p.revents & POLLRDHUP), "revents %#x", p.revents);
	CHECK(read(cfd, buf, sizeof(buf)) == 3, "data before EOF");
	CHECK(read(cfd, buf, sizeof(buf)) == 0, "EOF");
	close(cfd);
}

static void case_kill(void)
{
	uint16_t port;
	int lfd = t_listen(AF_INET, &port), fd, r;
	int64_t t0;
	pid_t pid;
	char c;

	fd = t_accept_doomed(lfd, port, &pid);
	t0 = t_ms();
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	r = (int)read(fd, &c, 1);
	CHECK(r == 0 || (r == -1 && errno == ECONNRESET), "read after peer crash: %d (%s)", r,
	      strerror(errno));
	CHECK(t_ms() - t0 < 1000, "took %lld ms", (long long)(t_ms() - t0));
	close(fd);
	close(lfd);
}

int main(int argc, char **argv)
{
	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	case_close();
	case_kill();
	CHECK(t_fast_await(2) == 2, "%d fast connections", t_fast_conns());
	return t_shim_finish();
}
