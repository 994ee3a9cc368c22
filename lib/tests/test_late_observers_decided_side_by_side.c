/* SPDX-License-Identifier: MIT */
/* Description: connects the program looks at late are decided side by side: one whose acceptor never accepts (its decision waits out the agent's peer wait) does not hold up the next one, made and completed while that decision waits, whose acceptor already waits in accept() for it; that one gets the fast path at both ends, bytes intact (one after the other, it fell to the overlay behind the slower decision: peer-timeout) */
/* Channels: unix host-tcp shm */
#include <pthread.h>

#include "pending_connect.h"

#define LATE_US	200000

static int served = -1;	/* the accepted end: swapped (1) or not (0) */

/* Accepts its one connection at once and serves it. */
static void *serve_one(void *arg)
{
	int fd = accept(*(int *)arg, NULL, NULL);

	served = fd >= 0 && t_swapped(fd);
	if (pc_serve(fd))
		served = 0;
	return NULL;
}

int main(int argc, char **argv)
{
	uint16_t slow_port, port;
	int slow_lfd, lfd, slow, fd;
	pthread_t th;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	slow_lfd = t_listen(AF_INET, &slow_port);	/* accepted only at the end */
	lfd = t_listen(AF_INET, &port);
	pthread_create(&th, NULL, serve_one, &lfd);

	slow = pc_start_connect(slow_port);
	/* Made while the slow one is being decided: it completes meanwhile. */
	CHECK(t_agent_await("ask", 1) >= 1, "the settler did not ask about the first connect");
	fd = pc_start_connect(port);
	usleep(LATE_US);	/* the program looks late at both */
	pc_finish(fd, "the connect behind a slow decision");
	pthread_join(th, NULL);
	CHECK(served == 1, "the accepted end was not swapped or lost bytes");

	close(accept(slow_lfd, NULL, NULL));
	close(slow);
	return t_shim_finish();
}
