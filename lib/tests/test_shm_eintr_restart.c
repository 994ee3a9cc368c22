/* SPDX-License-Identifier: MIT */
/* Description: a signal reaching a thread asleep in recv on a shared-memory connection restarts the wait when its handler has SA_RESTART (the data still arrives) and gives EINTR when it does not, as on a kernel socket */
/* Channels: shm shm-link */
#include "shimtest.h"

struct sleeper {
	int fd;
	ssize_t r;
	int err;
	char c;
};

static void *sleep_in_recv(void *p)
{
	struct sleeper *s = p;

	s->r = recv(s->fd, &s->c, 1, 0);
	s->err = errno;
	return NULL;
}

static void one(int restart)
{
	struct sleeper s = { 0 };
	pthread_t th;
	int cfd, sfd, h0 = t_caught;

	t_sigaction(SIGUSR1, t_catch, restart ? SA_RESTART : 0);
	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(cfd), "not on shm");
	s.fd = cfd;
	pthread_create(&th, NULL, sleep_in_recv, &s);
	usleep(100000);
	pthread_kill(th, SIGUSR1);
	usleep(100000);
	CHECK(send(sfd, "z", 1, 0) == 1, "send");
	pthread_join(th, NULL);
	CHECK(t_caught == h0 + 1, "the handler ran %d times", t_caught - h0);
	if (restart)
		CHECK(s.r == 1 && s.c == 'z', "SA_RESTART: recv gave %zd (%s), want the byte", s.r,
		      strerror(s.err));
	else
		CHECK(s.r == -1 && s.err == EINTR, "no SA_RESTART: recv gave %zd (%s), want EINTR",
		      s.r, strerror(s.err));
	close(cfd);
	close(sfd);
}

int main(int argc, char **argv)
{
	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	one(1);
	one(0);
	return t_shim_finish();
}
