/* SPDX-License-Identifier: MIT */
/* Description: an edge-triggered echo as tokio's echo examples do it, one connection at a time and 8 at once: the client writes its message, shuts down writing, and reads the echo to EOF; the server echoes and closes at EOF; short reads taken as "empty", registrations through a copy of the epoll fd; the EOF after the last byte is always reported (no client left waiting), every echo intact within the deadline */
/* Channels: unix shm shm-link */
#include "evloop_echo.h"

int main(int argc, char **argv)
{
	struct ee_params p = { .conns = 300, .in_flight = 1, .max_size = 64u << 10, .fixed = 1,
			       .edge = 1, .registry_dup = 1, .half_close = 1, .seed = 20261128 };

	(void)argc;
	if (getenv("FF_TEST_IN_FLIGHT"))
		p.in_flight = atoi(getenv("FF_TEST_IN_FLIGHT"));
	return ee_main(argv, &p);
}
