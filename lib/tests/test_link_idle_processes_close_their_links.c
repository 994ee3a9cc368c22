/* SPDX-License-Identifier: MIT */
/* Description: a connector and an acceptor that never call the library again after their last connection over a same-host link (idle processes) still close the link when it ends, LINK_TTL after the grant (the acceptor 1 s later): neither holds a socket of the other container's for longer (a migration's checkpoint waits for that) */
/* Channels: shm-link */
#include "shimtest.h"

#define CONNS	4
#define N	(4u << 10)
#define TTL	"3000"	/* ms: the client looks right after its last connection, well within it */
#define WAIT_MS	(3000 + 1000 + 3000)

/* The link sockets this process holds: AF_UNIX SOCK_SEQPACKET with an unnamed peer (a session's is the agent's socket). */
static int links_held(void)
{
	int n = 0;

	for (int fd = 0; fd < 1024; fd++) {
		struct sockaddr_un peer;
		socklen_t len = sizeof(peer);

		n += t_real_domain(fd) == AF_UNIX && t_real_sockopt(fd, SOL_SOCKET, SO_TYPE) == SOCK_SEQPACKET &&
		     !getpeername(fd, (struct sockaddr *)&peer, &len) && len <= sizeof(sa_family_t);
	}
	return n;
}

/* Wait, calling nothing of the library, until who holds no link. */
static void await_none(const char *who)
{
	int64_t end = t_ms() + WAIT_MS;
	int left;

	CHECK(links_held() > 0, "%s holds no link: the test proves nothing", who);
	while ((left = links_held()) > 0 && t_ms() < end)
		usleep(20 * 1000);
	CHECK(left == 0, "%s, idle, still holds %d link sockets %d ms after its last connection", who, left,
	      WAIT_MS);
}

static int client(int go, uint16_t port)
{
	t_paced_client(go, port, CONNS, N);
	await_none("the connector");
	return t_exit_code();
}

int main(int argc, char **argv)
{
	int go, lfd;
	pid_t pid;

	(void)argc;
	setenv("FF_TEST_LINK_TTL", TTL, 1);
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen_fork(client, &go, &pid);
	for (int i = 0; i < CONNS; i++)
		t_paced_accept(lfd, go, i, N);
	await_none("the acceptor");
	t_wait_child(pid, "client");
	close(lfd);
	return t_shim_finish();
}
