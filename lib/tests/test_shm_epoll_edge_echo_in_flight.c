/* SPDX-License-Identifier: MIT */
/* Description: an edge-triggered epoll echo server and client as async runtimes (tokio) drive them: 16 non-blocking connections in flight at once, each one message of a random size up to 4 MiB (a 64 KiB ring fills many times over), random partial reads and writes, a short read taken as "empty", registrations through a copy of the epoll fd (as mio does) and, on the server, from an accepting thread while the loop sleeps; every echo intact within the deadline, no reset, no hang */
/* Channels: unix shm */
#include "evloop_echo.h"

int main(int argc, char **argv)
{
	struct ee_params p = { .conns = 300, .in_flight = 16, .max_size = 4u << 20, .edge = 1,
			       .other_thread = 1, .registry_dup = 1,
			       .seed = 20261125 };

	(void)argc;
	setenv("FF_TEST_SHM_RING", "65536", 0);	/* read by the fake agent */
	return ee_main(argv, &p);
}
