/* SPDX-License-Identifier: MIT */
/* Description: a listener that accepts the request of a connector whose process was stopped once its REQ was in (SIGSTOP: nothing answers the REP, neither an RTU nor an MRA) gets UNREACHABLE with status -ETIMEDOUT after 10 s, as the kernel's CM reports an unanswered REP, not a wait for ever */
#include "rdmacmtest.h"

static int connector(int sock)
{
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1, .retry_count = 7 };
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id = tr_connect_to(sock, &ch);

	TV_MUST(rdma_connect(id, &cp) == 0, "connect: %s", strerror(errno));
	pause();		/* stopped, then killed */
	return 1;
}

int main(int argc, char **argv)
{
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1 };
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *l, *id;
	int64_t t0, took;
	pid_t pid;
	int sock;

	(void)argc;
	tr_setup(argv);
	pid = tv_fork(connector, &sock);
	ch = rdma_create_event_channel();
	TV_MUST(ch, "event channel: %s", strerror(errno));
	l = tr_listen(ch, sock);
	ev = tr_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
	id = ev->id;
	rdma_ack_cm_event(ev);
	tr_stop(pid);
	t0 = t_ms();
	TV_MUST(rdma_accept(id, &cp) == 0, "accept: %s", strerror(errno));
	ev = tr_event_within(ch, RDMA_CM_EVENT_UNREACHABLE, TR_ANSWER_MS + 5000);
	took = t_ms() - t0;
	CHECK(ev->status == -ETIMEDOUT, "UNREACHABLE with status %d, want -ETIMEDOUT", ev->status);
	CHECK(took >= TR_ANSWER_MS - T_SLACK_MS, "gave up after %lld ms: a peer has %d ms to answer",
	      (long long)took, TR_ANSWER_MS);
	printf("UNREACHABLE after %lld ms\n", (long long)took);
	rdma_ack_cm_event(ev);
	tr_kill(pid);
	CHECK(rdma_destroy_id(id) == 0 && rdma_destroy_id(l) == 0, "destroy the ids: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
	return t_shim_finish();
}
