/* SPDX-License-Identifier: MIT */
/* Description: a connected peer that closes its event channel without rdma_disconnect or destroying its id (the kernel destroys the channel's ids), then one killed: the other end gets DISCONNECTED each time, within seconds, and can destroy its id */
#include "rdmacmtest.h"

/* The listener accepts, closes its channel's fd; accepts again, then dies as a killed process does. */
static int listener(int sock)
{
	struct rdma_cm_id *id;
	struct rdma_event_channel *ch = tr_accept_one(sock, &id);

	tv_hear(sock, 'c');
	close(ch->fd);
	tv_hear(sock, 'n');
	tr_accept_one(sock, &id);
	tv_hear(sock, 'd');
	raise(SIGKILL);
	return 1;
}

/* Connect to the listener; wait for DISCONNECTED after saying what (c: close, d: die). */
static void connect_and_lose(struct rdma_event_channel *ch, int sock, char what)
{
	struct ibv_cq *cq;
	struct rdma_cm_id *id = tr_connected(ch, sock, &cq);

	tv_say(sock, what);
	tr_ack(ch, RDMA_CM_EVENT_DISCONNECTED);
	tr_drop_qp(id, cq);
	CHECK(rdma_destroy_id(id) == 0, "destroy the id: %s", strerror(errno));
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	pid_t pid;
	int sock, st;

	(void)argc;
	tr_setup(argv);
	pid = tv_fork(listener, &sock);
	ch = tr_channel();
	connect_and_lose(ch, sock, 'c');
	tv_say(sock, 'n');
	connect_and_lose(ch, sock, 'd');
	CHECK(waitpid(pid, &st, 0) == pid && WIFSIGNALED(st), "the listener did not die (status %#x)", st);
	rdma_destroy_event_channel(ch);
	return t_shim_finish();
}
