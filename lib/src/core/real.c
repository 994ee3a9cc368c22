/* SPDX-License-Identifier: MIT */
/*
 * libc's real functions, resolved once (checked dlsym), the re-entry guard
 * ff_busy, and the library's quiet threads: what every other part of the
 * library needs from libc, and nothing of the library itself.
 *
 * ff_real_resolve() is the one place that fills ff_real: ff_init() runs it
 * first, the agent client before its first call (so a unit test linking
 * the client without the library works too).
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/core.h"

struct ff_real ff_real;
_Thread_local int ff_busy;

static pthread_once_t resolve_once = PTHREAD_ONCE_INIT;

/*
 * A missing libc function means this libc is not one the shim can work
 * with; carrying on would call through NULL later, far from the cause.
 * The message goes out by libc's syscall(), resolved first: write() is
 * the shim's own wrapper, which would wait for this very initialisation.
 */
static void *resolve(const char *name, int required)
{
	void *p = dlsym(RTLD_NEXT, name);

	if (!p && required) {
		char msg[256];
		int n = snprintf(msg, sizeof(msg),
				 "libfreeflow: cannot find libc's %s (%s); remove libfreeflow.so from LD_PRELOAD\n",
				 name, dlerror());

		if (ff_real.syscall && n > 0)
			ff_real.syscall(SYS_write, 2, msg, (size_t)n < sizeof(msg) ? (size_t)n
								     : sizeof(msg) - 1);
		abort();
	}
	return p;
}

#define NEED(fn)		(ff_real.fn = resolve(#fn, 1))
#define MAYBE(fn, sym)		(ff_real.fn = resolve(sym, 0))
/* As MAYBE, or the system call itself when libc lacks the function (older than the kernel). */
#define OR_SYS(fn, sym)		do { if (!MAYBE(fn, sym)) ff_real.fn = sys_##fn; } while (0)

/*
 * What syscall(SYS_close_range), syscall(SYS_epoll_pwait2) and closefrom
 * did without the shim on a libc older than the kernel; the wrappers of
 * the functions (and syscall(), routes.c) go through these then.
 */
static int sys_close_range(unsigned first, unsigned last, int flags)
{
	return (int)ff_real.syscall(SYS_close_range, first, last, flags);
}

static int sys_epoll_pwait2(int epfd, struct epoll_event *evs, int max,
			    const struct timespec *ts, const sigset_t *mask)
{
	return (int)ff_real.syscall(SYS_epoll_pwait2, epfd, evs, max, ts, mask, _NSIG / 8);
}

static void sys_closefrom(int lowfd)
{
	ff_real.syscall(SYS_close_range, lowfd, ~0u, 0);
}

static void resolve_all(void)
{
	NEED(syscall);	/* first: resolve() reports through it */
	NEED(socket); NEED(connect); NEED(listen); NEED(accept); NEED(accept4);
	NEED(close); NEED(dup); NEED(dup2); NEED(dup3); NEED(fcntl);
	NEED(shutdown); NEED(ioctl); NEED(read); NEED(write); NEED(readv); NEED(writev);
	NEED(recv); NEED(send); NEED(recvfrom); NEED(sendto); NEED(recvmsg);
	NEED(sendmsg); NEED(sendfile); NEED(getsockname); NEED(getpeername);
	NEED(getsockopt); NEED(setsockopt); NEED(poll); NEED(select);
	NEED(epoll_create); NEED(epoll_create1); NEED(epoll_ctl); NEED(epoll_wait);
	NEED(epoll_pwait); NEED(ppoll);
	NEED(pselect); NEED(recvmmsg); NEED(sendmmsg); NEED(splice);
	NEED(execve); NEED(execvpe); NEED(fexecve); NEED(posix_spawn); NEED(posix_spawnp);
	NEED(vfork); NEED(fdopen); NEED(fclose); NEED(system); NEED(popen);
	NEED(freopen); NEED(freopen64);
	NEED(open);
	/* Newer or fortify-only entry points: a program can only call them if libc has them. */
	MAYBE(fcntl64, "fcntl64");
	MAYBE(read_chk, "__read_chk");
	MAYBE(recv_chk, "__recv_chk");
	MAYBE(recvfrom_chk, "__recvfrom_chk");
	MAYBE(poll_chk, "__poll_chk");
	MAYBE(ppoll_chk, "__ppoll_chk");
	OR_SYS(epoll_pwait2, "epoll_pwait2");
	OR_SYS(close_range, "close_range");
	OR_SYS(closefrom, "closefrom");
	MAYBE(preadv2, "preadv2");
	MAYBE(pwritev2, "pwritev2");
	MAYBE(_Fork, "_Fork");
}

void ff_real_resolve(void)
{
	pthread_once(&resolve_once, resolve_all);
}

int ff_start_quiet_thread(void *(*fn)(void *))
{
	pthread_attr_t a;
	pthread_t t;
	sigset_t all, old;
	int ok;

	sigfillset(&all);
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ok = !pthread_create(&t, &a, fn, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&a);
	return ok;
}
