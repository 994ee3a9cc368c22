/* SPDX-License-Identifier: MIT */
/* Description: rdma_disconnect of a connection whose peer process is stopped (SIGSTOP: nothing answers the DREQ with a DREP) ends in DISCONNECTED with status -ETIMEDOUT after 10 s, as the kernel's CM reports an unanswered DREQ, not in a wait for ever */
#include "rdmacmtest.h"

static int listener(int sock)
{
	struct rdma_cm_id *id;

	tr_accept_one(sock, &id);
	pause();		/* stopped, then killed */
	return 1;
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_cq *cq;
	int64_t t0;
	pid_t pid;
	int sock;

	(void)argc;
	tr_setup(argv);
	pid = tv_fork(listener, &sock);
	ch = tr_channel();
	id = tr_connected(ch, sock, &cq);
	tr_stop(pid);
	t0 = t_ms();
	TV_MUST(rdma_disconnect(id) == 0, "disconnect: %s", strerror(errno));
	tr_timed_out(ch, RDMA_CM_EVENT_DISCONNECTED, t0);
	tr_kill(pid);
	tr_drop_qp(id, cq);
	CHECK(rdma_destroy_id(id) == 0, "destroy the id: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
	return t_shim_finish();
}
