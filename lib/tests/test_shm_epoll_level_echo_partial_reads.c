/* SPDX-License-Identifier: MIT */
/* Description: a level-triggered epoll echo server and client that read less than is there (one read of a random size per report, as libuv and asyncio loops do), 16 non-blocking connections in flight, messages of random sizes up to 4 MiB through 64 KiB rings, random partial writes, EPOLLOUT after a full ring; every echo intact within the deadline, no reset, no hang */
/* Channels: unix shm shm-link */
#include "evloop_echo.h"

int main(int argc, char **argv)
{
	struct ee_params p = { .conns = 200, .in_flight = 16, .max_size = 4u << 20,
			       .seed = 20261126 };

	(void)argc;
	setenv("FF_TEST_SHM_RING", "65536", 0);	/* read by the fake agent */
	return ee_main(argv, &p);
}
