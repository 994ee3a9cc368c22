/* SPDX-License-Identifier: MIT */
/* Description: a thread asleep in recv on a shared-memory connection, interrupted by a signal whose handler has SA_RESTART, goes on waiting (and gets the data) even though the process also has handlers without SA_RESTART that cannot have interrupted it: a fault handler (SIGSEGV) and the handler of a signal this thread blocks */
/* Channels: shm shm-link */
#include "shimtest.h"

struct sleeper {
	int fd;
	_Atomic pid_t tid;
	ssize_t r;
	int err;
	char c;
};

static void *sleep_in_recv(void *p)
{
	struct sleeper *s = p;
	sigset_t usr2;

	sigemptyset(&usr2);
	sigaddset(&usr2, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &usr2, NULL);
	s->tid = gettid();
	s->r = recv(s->fd, &s->c, 1, 0);
	s->err = errno;
	return NULL;
}

/* Whether thread tid is asleep in the kernel (state S), past the library's spin. */
static int asleep(pid_t tid)
{
	char path[64], buf[256], *p;
	int fd, n;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	n = fd < 0 ? -1 : (int)read(fd, buf, sizeof(buf) - 1);
	if (fd >= 0)
		close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] == 'S';
}

int main(int argc, char **argv)
{
	struct sleeper s = { 0 };
	pthread_t th;
	int cfd, sfd, still = 0;
	int64_t end;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	t_sigaction(SIGSEGV, t_never, 0);
	t_sigaction(SIGUSR2, t_never, 0);
	t_sigaction(SIGUSR1, t_catch, SA_RESTART);
	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(cfd), "not on shm");
	s.fd = cfd;
	pthread_create(&th, NULL, sleep_in_recv, &s);
	/* Asleep for 20 looks in a row, 1 ms apart: past any spin, in the wait. */
	for (end = t_ms() + T_SLACK_MS; still < 20 && t_ms() < end; usleep(1000))
		still = s.tid && asleep(s.tid) ? still + 1 : 0;
	CHECK(still == 20, "the reader never slept in recv");
	pthread_kill(th, SIGUSR1);
	while (!t_caught && t_ms() < end)
		usleep(1000);
	CHECK(send(sfd, "z", 1, 0) == 1, "send");
	pthread_join(th, NULL);
	CHECK(t_caught == 1, "the handler ran %d times", (int)t_caught);
	CHECK(s.r == 1 && s.c == 'z', "recv gave %zd (%s), want the byte: handlers that cannot interrupt it counted",
	      s.r, strerror(s.err));
	close(cfd);
	close(sfd);
	return t_shim_finish();
}
