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
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1, .retry_count = 7 };
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct ibv_cq *cq;
	int64_t t0, took;
	pid_t pid;
	int sock;

	(void)argc;
	tr_setup(argv);
	pid = tv_fork(listener, &sock);
	id = tr_connect_to(sock, &ch);
	cq = tr_qp(id);
	TV_MUST(rdma_connect(id, &cp) == 0, "connect: %s", strerror(errno));
	tr_ack(ch, RDMA_CM_EVENT_ESTABLISHED);
	tr_stop(pid);
	t0 = t_ms();
	TV_MUST(rdma_disconnect(id) == 0, "disconnect: %s", strerror(errno));
	ev = tr_event_within(ch, RDMA_CM_EVENT_DISCONNECTED, TR_ANSWER_MS + 5000);
	took = t_ms() - t0;
	CHECK(ev->status == -ETIMEDOUT, "DISCONNECTED with status %d, want -ETIMEDOUT", ev->status);
	CHECK(took >= TR_ANSWER_MS - T_SLACK_MS, "gave up after %lld ms: a peer has %d ms to answer",
	      (long long)took, TR_ANSWER_MS);
	printf("DISCONNECTED after %lld ms\n", (long long)took);
	rdma_ack_cm_event(ev);
	tr_kill(pid);
	tr_drop_qp(id, cq);
	CHECK(rdma_destroy_id(id) == 0, "destroy the id: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
	return t_shim_finish();
}
