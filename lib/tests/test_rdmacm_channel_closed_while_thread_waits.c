/* SPDX-License-Identifier: MIT */
/* Description: as rping tears down: a thread asleep in rdma_get_cm_event while another destroys the id and the channel stays asleep (the kernel keeps the file until that write returns), it gets no error and no event of a channel opened after on the same number, which works */
#include "rdmacmtest.h"

static _Atomic int woke;

static void *wait_event(void *arg)
{
	struct rdma_cm_event *ev;

	rdma_get_cm_event(arg, &ev);
	woke = 1;
	return NULL;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				 .sin_port = htons(9) };
	struct rdma_event_channel *ch, *ch2;
	struct rdma_cm_id *id;
	pthread_t th;
	int fd;

	(void)argc;
	tr_setup(argv);
	ch = rdma_create_event_channel();
	TV_MUST(ch && rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "a channel and an id: %s", strerror(errno));
	fd = ch->fd;
	TV_MUST(pthread_create(&th, NULL, wait_event, ch) == 0, "a thread");
	usleep(100000);
	CHECK(rdma_destroy_id(id) == 0, "destroy the id: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
	ch2 = rdma_create_event_channel();
	TV_MUST(ch2, "a second channel: %s", strerror(errno));
	printf("first channel fd %d, second %d\n", fd, ch2->fd);
	TV_MUST(rdma_create_id(ch2, &id, NULL, RDMA_PS_TCP) == 0 &&
		rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000) == 0, "resolve: %s", strerror(errno));
	tr_ack(ch2, RDMA_CM_EVENT_ADDR_RESOLVED);
	usleep(200000);
	CHECK(!woke, "the thread asleep on the closed channel woke");
	CHECK(rdma_destroy_id(id) == 0, "destroy the second id: %s", strerror(errno));
	rdma_destroy_event_channel(ch2);
	return t_shim_finish();
}
