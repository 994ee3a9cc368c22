/* SPDX-License-Identifier: MIT */
/* Description: a listener that accepts the request of a connector whose process was stopped once its REQ was in (SIGSTOP: nothing answers the REP, neither an RTU nor an MRA) gets UNREACHABLE with status -ETIMEDOUT after 10 s, as the kernel's CM reports an unanswered REP, not a wait for ever */
#include "rdmacmtest.h"

int main(int argc, char **argv)
{
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1 };
	struct rdma_event_channel *ch;
	struct rdma_cm_id *l, *id;
	int64_t t0;
	pid_t pid;
	int sock;

	(void)argc;
	tr_setup(argv);
	pid = tv_fork(tr_silent_connector, &sock);
	id = tr_listen_for_one(sock, &ch, &l);
	tr_stop(pid);
	t0 = t_ms();
	TV_MUST(rdma_accept(id, &cp) == 0, "accept: %s", strerror(errno));
	tr_timed_out(ch, RDMA_CM_EVENT_UNREACHABLE, t0);
	tr_kill(pid);
	CHECK(rdma_destroy_id(id) == 0 && rdma_destroy_id(l) == 0, "destroy the ids: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
	return t_shim_finish();
}
