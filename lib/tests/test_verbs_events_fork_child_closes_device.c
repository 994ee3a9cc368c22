/* SPDX-License-Identifier: MIT */
/* Description: a child forked after its parent made a completion channel's CQ (so the context has an event thread, which the child does not) closes the device: it exits instead of waiting for a thread it never had, and the parent's events and teardown are untouched */
#include <poll.h>
#include <sys/syscall.h>

#include "verbstest.h"

int main(int argc, char **argv)
{
	struct ibv_comp_channel *ch;
	struct pollfd p;
	struct tv_end e;
	int pidfd, st;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	tv_device(&e, &ch);
	pid = fork();
	if (pid == 0) {
		ibv_close_device(e.ctx);
		_exit(0);
	}
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	TV_MUST(pid > 0 && pidfd >= 0, "fork and pidfd: %s", strerror(errno));
	p = (struct pollfd){ .fd = pidfd, .events = POLLIN };
	CHECK(poll(&p, 1, 10000) == 1, "the child that closed the device did not exit within 10 s");
	if (p.revents == 0)
		kill(pid, SIGKILL);
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child: status %#x", st);
	CHECK(ibv_destroy_cq(e.cq) == 0 && ibv_destroy_comp_channel(ch) == 0 && ibv_dealloc_pd(e.pd) == 0 &&
	      ibv_close_device(e.ctx) == 0, "the parent's teardown");
	return t_shim_finish();
}
