/* SPDX-License-Identifier: MIT */
/* Description: a process with an rdma_cm listener and a connected id, asleep in poll on its event channel and in a blocking rdma_get_cm_event, costs no CPU: 1 s of each uses under 20 ms of the process's CPU (the CM thread sleeps in poll) */
#include <sys/resource.h>

#include "rdmacmtest.h"

#define MAX_CPU_US	20000

static int64_t process_cpu_us(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 + ru.ru_utime.tv_usec +
	       ru.ru_stime.tv_usec;
}

static int listener(int sock)
{
	struct rdma_cm_id *id;
	struct rdma_event_channel *ch = tr_accept_one(sock, &id);

	tv_hear(sock, 'd');
	TV_MUST(rdma_disconnect(id) == 0, "disconnect: %s", strerror(errno));
	tr_ack(ch, RDMA_CM_EVENT_DISCONNECTED);
	return 0;
}

/* The peer's disconnect, 1 s from now: what the blocking rdma_get_cm_event waits for. */
static void *disconnect_later(void *arg)
{
	int sock = *(int *)arg;

	usleep(1000000);
	tv_say(sock, 'd');
	return NULL;
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	struct ibv_cq *cq;
	struct rdma_cm_id *id, *l;
	struct pollfd p;
	int64_t c0, used;
	pthread_t th;
	pid_t pid;
	int sock;

	(void)argc;
	tr_setup(argv);
	pid = tv_fork(listener, &sock);
	ch = tr_channel();
	id = tr_connected(ch, sock, &cq);
	/* A listener of its own too: its socket is in the CM thread's poll. */
	l = tr_listener(ch);
	p = (struct pollfd){ .fd = ch->fd, .events = POLLIN };
	c0 = process_cpu_us();
	CHECK(poll(&p, 1, 1000) == 0, "an event on an idle channel");
	used = process_cpu_us() - c0;
	CHECK(used < MAX_CPU_US, "1 s in poll on the channel used %lld us of CPU", (long long)used);
	printf("1 s in poll on the channel: %lld us of CPU\n", (long long)used);
	/* The peer disconnects in 1 s; meanwhile asleep in the blocking GET_EVENT. */
	TV_MUST(pthread_create(&th, NULL, disconnect_later, &sock) == 0, "a thread");
	c0 = process_cpu_us();
	TV_MUST(rdma_get_cm_event(ch, &ev) == 0 && ev->event == RDMA_CM_EVENT_DISCONNECTED,
		"rdma_get_cm_event: %s", strerror(errno));
	used = process_cpu_us() - c0;
	rdma_ack_cm_event(ev);
	CHECK(used < MAX_CPU_US, "1 s in rdma_get_cm_event used %lld us of CPU", (long long)used);
	printf("1 s in rdma_get_cm_event: %lld us of CPU\n", (long long)used);
	pthread_join(th, NULL);
	tr_drop_qp(id, cq);
	CHECK(rdma_destroy_id(id) == 0 && rdma_destroy_id(l) == 0, "destroy the ids: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
	tv_join(pid);
	return t_shim_finish();
}
