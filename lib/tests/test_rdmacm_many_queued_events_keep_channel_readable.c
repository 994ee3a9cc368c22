/* SPDX-License-Identifier: MIT */
/* Description: 100000 events queued on a channel nobody reads (more bytes than a pseudo-terminal holds: one byte per event blocked the queueing command for ever): queueing never blocks, poll reports the channel readable until the last one is read and not after */
#include "rdmacmtest.h"

#define N 100000

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				 .sin_port = htons(9) };
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct pollfd p;
	int i, bad = 0;

	(void)argc;
	tr_setup(argv);
	ch = rdma_create_event_channel();
	TV_MUST(ch && rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "a channel and an id: %s", strerror(errno));
	/* Each resolve of an id not connected yet queues an ADDR_RESOLVED. */
	for (i = 0; i < N; i++)
		TV_MUST(rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000) == 0, "resolve %d: %s", i,
			strerror(errno));
	p = (struct pollfd){ .fd = ch->fd, .events = POLLIN };
	for (i = 0; i < N; i++) {
		if (poll(&p, 1, 0) != 1 && !bad++)
			CHECK(0, "the channel is not readable with %d events queued", N - i);
		TV_MUST(rdma_get_cm_event(ch, &ev) == 0 && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED,
			"event %d: %s", i, strerror(errno));
		rdma_ack_cm_event(ev);
	}
	CHECK(poll(&p, 1, 0) == 0, "the channel is readable with no event queued");
	CHECK(rdma_destroy_id(id) == 0, "destroy the id: %s", strerror(errno));
	rdma_destroy_event_channel(ch);
	return t_shim_finish();
}
