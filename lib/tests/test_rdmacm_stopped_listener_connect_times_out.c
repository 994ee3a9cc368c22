/* SPDX-License-Identifier: MIT */
/* Description: a connect to a listener whose process is stopped (SIGSTOP: the kernel takes the TCP connection into the backlog, nothing answers the REQ, not even with an MRA) ends in UNREACHABLE with status -ETIMEDOUT after 10 s, as the kernel's CM reports an unanswered REQ, not in a wait for ever */
#include "rdmacmtest.h"

static int listener(int sock)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();

	TV_MUST(ch, "event channel: %s", strerror(errno));
	tr_listen(ch, sock);
	pause();		/* stopped, then killed */
	return 1;
}

int main(int argc, char **argv)
{
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1, .retry_count = 7 };
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	int64_t t0, took;
	pid_t pid;
	int sock;

	(void)argc;
	tr_setup(argv);
	pid = tv_fork(listener, &sock);
	id = tr_connect_to(sock, &ch);	/* the port told: it listens */
	tr_stop(pid);
	t0 = t_ms();
	TV_MUST(rdma_connect(id, &cp) == 0, "connect: %s", strerror(errno));
	ev = tr_event_within(ch, RDMA_CM_EVENT_UNREACHABLE, TR_ANSWER_MS + 5000);
	took = t_ms() - t0;
	CHECK(ev->status == -ETIMEDOUT, "UNREACHABLE with status %d, want -ETIMEDOUT", ev->status);
	CHECK(took >= TR_ANSWER_MS - T_SLACK_MS, "gave up after %lld ms: a peer has %d ms to answer",
	      (long long)took, TR_ANSWER_MS);
	printf("UNREACHABLE after %lld ms\n", (long long)took);
	rdma_ack_cm_event(ev);
	tr_kill(pid);
	CHECK(rdma_destroy_id(id) == 0, "destroy the id: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
	return t_shim_finish();
}
