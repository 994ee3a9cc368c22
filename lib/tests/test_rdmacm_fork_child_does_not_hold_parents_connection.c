/* SPDX-License-Identifier: MIT */
/* Description: a process connected through rdma_cm forks a child that lives on, then is killed: its peer still gets DISCONNECTED at once (the child dropped its copies of the CM's sockets), and the child can open a channel of its own */
#include "rdmacmtest.h"

/* The forked child: a channel of its own works; then it lives on until the test ends (its socket pair's end hangs up). */
static void child(int sock)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct pollfd p = { .fd = sock, .events = POLLRDHUP };

	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) || rdma_destroy_id(id))
		_exit(1);
	poll(&p, 1, 20000);
	_exit(0);
}

/* The listener accepts, forks a child that outlives it, then dies as a killed process does. */
static int listener(int sock)
{
	struct rdma_cm_id *id;

	tr_accept_one(sock, &id);
	if (fork() == 0)
		child(sock);
	tv_hear(sock, 'd');
	raise(SIGKILL);
	return 1;
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	struct ibv_cq *cq;
	struct rdma_cm_id *id;
	pid_t pid;
	int sock, st;

	(void)argc;
	tr_setup(argv);
	pid = tv_fork(listener, &sock);
	ch = tr_channel();
	id = tr_connected(ch, sock, &cq);
	tv_say(sock, 'd');
	CHECK(waitpid(pid, &st, 0) == pid && WIFSIGNALED(st), "the listener did not die (status %#x)", st);
	tr_ack(ch, RDMA_CM_EVENT_DISCONNECTED);
	tr_drop_qp(id, cq);
	CHECK(rdma_destroy_id(id) == 0, "destroy the id: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
	return t_shim_finish();
}
