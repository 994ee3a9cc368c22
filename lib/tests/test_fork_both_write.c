/* SPDX-License-Identifier: MIT */
/* Description: fork after the swap: parent and child both write on the inherited connection and the peer gets every record intact; a connection made in the child after fork is swapped too (the child reopens its agent session); on shm the connection first moves down to a kernel channel, which both processes share */
/* Channels: unix host-tcp shm shm-link */
#include "shimtest.h"

#define RECS	200
#define RLEN	64

static void write_records(int fd, char tag)
{
	char rec[RLEN];

	for (int i = 0; i < RECS; i++) {
		memset(rec, tag, sizeof(rec));
		rec[0] = (char)i;
		/* One write of 64 bytes on a stream socket (AF_UNIX or TCP) is not split. */
		if (write(fd, rec, sizeof(rec)) != sizeof(rec))
			_exit(1);
	}
}

struct reader {
	int fd, bad, seen[2];
};

/* The peer reads while both processes write: small writes fill a socket buffer fast. */
static void *read_records(void *p)
{
	struct reader *r = p;

	for (int i = 0; i < 2 * RECS; i++) {
		char rec[RLEN];
		int j;

		if (recv(r->fd, rec, sizeof(rec), MSG_WAITALL) != sizeof(rec)) {
			r->bad++;
			break;
		}
		for (j = 1; j < RLEN && rec[j] == rec[1]; j++)
			;
		if (j != RLEN || (rec[1] != 'c' && rec[1] != 'p'))
			r->bad++;
		else
			r->seen[rec[1] == 'c']++;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct reader r = { 0 };
	int cfd, lfd, afd;
	uint16_t port;
	pthread_t th;
	pid_t pid;
	char c;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	t_pair(AF_INET, &cfd, &r.fd);
	CHECK(t_swapped(cfd), "not swapped");
	lfd = t_listen(AF_INET, &port);
	pid = fork();
	if (pid == 0) {
		int fd2;

		close(r.fd);
		write_records(cfd, 'c');
		/* A new connection from the child needs its own agent session. */
		fd2 = t_connect(AF_INET, port);
		_exit(t_swapped(fd2) ? 0 : 2);
	}
	pthread_create(&th, NULL, read_records, &r);
	write_records(cfd, 'p');
	afd = accept(lfd, NULL, NULL);
	CHECK(t_swapped(afd), "connection from the child not swapped");
	close(afd);
	t_wait_child(pid, "child");
	close(cfd);
	pthread_join(th, NULL);
	CHECK(!r.bad && r.seen[0] == RECS && r.seen[1] == RECS, "bad %d, parent %d, child %d",
	      r.bad, r.seen[0], r.seen[1]);
	CHECK(read(r.fd, &c, 1) == 0, "no EOF once both processes closed");
	close(r.fd);
	close(lfd);
	CHECK(t_fast_await(2) == 2, "%d fast connections", t_fast_conns());
	return t_shim_finish();
}
