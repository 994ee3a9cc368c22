/* SPDX-License-Identifier: MIT */
/* Description: the program closes a thread's agent session by its number and opens a file there: the thread's exit leaves that file open and intact (the library closes only a number still marked as its session) */
#include "shimtest.h"

struct connector {
	struct t_conn_arg conn;
	int ready[2];	/* the thread writes a byte once its connect returned */
	int go[2];	/* the thread exits once main writes a byte */
};

static void *connector(void *p)
{
	struct connector *a = p;
	char b;

	t_connect_thread(&a->conn);
	if (write(a->ready[1], "r", 1) != 1 || read(a->go[0], &b, 1) != 1)
		perror("connector: ready/go");
	return NULL;
}

/* The AF_UNIX SOCK_SEQPACKET fds (agent sessions) from 0 to max-1, as a bit each in seen. */
static void sessions(unsigned char *seen, int max)
{
	for (int fd = 0; fd < max; fd++) {
		int type = 0, dom = 0;
		socklen_t l1 = sizeof(type), l2 = sizeof(dom);

		seen[fd] = !getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l1) &&
			   !getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &l2) &&
			   type == SOCK_SEQPACKET && dom == AF_UNIX;
	}
}

int main(int argc, char **argv)
{
	enum { MAX = 256 };
	unsigned char before[MAX], after[MAX];
	struct connector a = { .conn.family = AF_INET };
	int lfd, sfd, n = -1, f = -1;
	char c;
	pthread_t th;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen(AF_INET, &a.conn.port);
	CHECK(pipe2(a.ready, O_CLOEXEC) == 0 && pipe2(a.go, O_CLOEXEC) == 0, "pipe: %s",
	      strerror(errno));
	sessions(before, MAX);
	pthread_create(&th, NULL, connector, &a);
	sfd = accept(lfd, NULL, NULL);
	CHECK(sfd >= 0, "accept: %s", strerror(errno));
	/* Once its connect returned (decided), the thread's session is the one new session. */
	CHECK(read(a.ready[0], &c, 1) == 1, "read ready: %s", strerror(errno));
	CHECK(t_swapped(sfd), "the connection was not swapped: no session asked the agent");
	sessions(after, MAX);
	for (int fd = 0; fd < MAX; fd++)
		if (after[fd] && !before[fd])
			n = n < 0 ? fd : -2;
	CHECK(n >= 0, n == -1 ? "no agent session of the connecting thread found" :
			      "more than one new agent session: which is the thread's?");
	if (n >= 0) {
		/* The program takes the number back, as a daemon closing every fd would. */
		CHECK(close(n) == 0, "close(%d): %s", n, strerror(errno));
		f = t_file_at(n, 1 << 20, 0x3c);
		CHECK(f == n, "the file did not get the session's number %d (%d)", n, f);
	}
	CHECK(write(a.go[1], "x", 1) == 1, "write go: %s", strerror(errno));
	pthread_join(th, NULL);
	if (n >= 0 && f == n) {
		int r;

		CHECK(fcntl(n, F_GETFD) >= 0, "the thread's exit closed the program's file at %d: %s",
		      n, strerror(errno));
		r = t_get_stream(n, 0, 1 << 20, 0x3c, t_io_read, NULL);
		CHECK(r == 0, "the file at %d read %s", n,
		      r == -1 ? "short (EOF or an error)" : "wrong bytes");
		close(n);
	}
	close(sfd);
	close(a.conn.fd);
	close(lfd);
	for (int i = 0; i < 2; i++) {
		close(a.ready[i]);
		close(a.go[i]);
	}
	return t_shim_finish();
}
