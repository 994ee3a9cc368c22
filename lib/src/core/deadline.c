/* SPDX-License-Identifier: MIT */
/* The bounded poll of one fd and the restart rule of signals (core.h); the clock is inline there. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>

#include "core/core.h"

int ff_poll_until(int fd, short ev, int64_t end_ms)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = ev };
		int64_t left = end_ms - ff_now_ms();
		int n;

		if (left <= 0)
			return 0;
		n = ff_real.poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
		if (n > 0)
			return 1;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

/*
 * A fault signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS) comes
 * from the thread's own instructions, never while it waits in a system
 * call, and a signal this thread blocks is delivered to another: neither
 * can have interrupted the wait. Sanitizers and crash reporters install
 * fault handlers without SA_RESTART.
 */
int ff_signal_restarts(void)
{
	static const int faults[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS };
	struct sigaction sa;
	sigset_t skip;

	if (pthread_sigmask(SIG_BLOCK, NULL, &skip))
		sigemptyset(&skip);
	for (size_t i = 0; i < sizeof(faults) / sizeof(faults[0]); i++)
		sigaddset(&skip, faults[i]);
	for (int sig = 1; sig < NSIG; sig++)
		if (!sigismember(&skip, sig) && sigaction(sig, NULL, &sa) == 0 &&
		    sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN &&
		    !(sa.sa_flags & SA_RESTART))
			return 0;
	return 1;
}

void ff_cond_init_monotonic(pthread_cond_t *cv)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &a);
	pthread_condattr_destroy(&a);
}
