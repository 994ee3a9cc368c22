/* SPDX-License-Identifier: MIT */
/* Description: a connect to a listener whose process is stopped (SIGSTOP: the kernel takes the TCP connection into the backlog, nothing answers the REQ, not even with an MRA) ends in UNREACHABLE with status -ETIMEDOUT after 10 s, as the kernel's CM reports an unanswered REQ, not in a wait for ever */
#include "rdmacmtest.h"

static int listener(int sock)
{
	tr_listen(tr_channel(), sock);
	pause();		/* stopped, then killed */
	return 1;
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	int64_t t0;
	pid_t pid;
	int sock;

	(void)argc;
	tr_setup(argv);
	pid = tv_fork(listener, &sock);
	id = tr_connect_to(sock, &ch);	/* the port told: it listens */
	tr_stop(pid);
	t0 = t_ms();
	tr_connect(id);
	tr_timed_out(ch, RDMA_CM_EVENT_UNREACHABLE, t0);
	tr_kill(pid);
	CHECK(rdma_destroy_id(id) == 0, "destroy the id: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
	return t_shim_finish();
}
