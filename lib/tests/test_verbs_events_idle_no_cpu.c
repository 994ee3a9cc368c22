/* SPDX-License-Identifier: MIT */
/* Description: a process asleep on its completion channel costs no CPU: with an armed CQ, a QP and the context's event thread, 1 s of waiting for an event that does not come uses under 20 ms of the process's CPU (the thread sleeps in the kernel on its doorbell) */
/* Channels: shm host-tcp */
#include <sys/resource.h>

#include "verbstest.h"

#define MAX_CPU_US	20000

static int64_t process_cpu_us(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 + ru.ru_utime.tv_usec +
	       ru.ru_stime.tv_usec;
}

int main(int argc, char **argv)
{
	struct ibv_comp_channel *ch;
	struct pollfd p;
	struct tv_end e;
	int64_t c0, used;

	(void)argc;
	tv_setup(argv);
	tv_open_ch(&e, &ch);
	TV_MUST(ibv_req_notify_cq(e.cq, 0) == 0, "arm");
	p = (struct pollfd){ .fd = ch->fd, .events = POLLIN };
	c0 = process_cpu_us();
	CHECK(poll(&p, 1, 1000) == 0, "an event came with nothing sent");
	used = process_cpu_us() - c0;
	CHECK(used < MAX_CPU_US, "1 s asleep on the channel used %lld us of CPU", (long long)used);
	printf("1 s asleep on the channel: %lld us of CPU\n", (long long)used);
	return t_shim_finish();
}
