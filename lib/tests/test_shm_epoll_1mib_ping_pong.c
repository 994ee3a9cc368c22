/* SPDX-License-Identifier: MIT */
/* Description: 1 MiB messages on epoll, one connection at a time (each message fills the ring four times over; the writer waits for EPOLLOUT after a full ring while the reader reads random sizes), edge-triggered with registrations through a copy of the epoll fd, 150 connections; every echo intact within the deadline, no stall */
/* Channels: unix shm shm-link */
#include "evloop_echo.h"

int main(int argc, char **argv)
{
	struct ee_params p = { .conns = 150, .in_flight = 1, .max_size = 1u << 20, .fixed = 1,
			       .edge = 1, .registry_dup = 1, .seed = 20261127 };

	(void)argc;
	setenv("FF_TEST_SHM_RING", "262144", 0);	/* read by the fake agent: the cases fill its rings */
	return ee_main(argv, &p);
}
