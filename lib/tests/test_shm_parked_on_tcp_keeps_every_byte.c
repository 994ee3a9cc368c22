/* SPDX-License-Identifier: MIT */
/* Description: an shm connection parked on TCP for a migration (the agent hands each end a TCP socket at the connection's tuple, made in repair mode; the library's parking thread moves its end there while the program does not call it) loses, repeats and reorders no byte: what each end wrote and the other had not read yet (up to 3 MiB one way and 2 MiB the other, as much as a ring lets in unread, checked unread in the rings before the park) arrives first, then what is written after; both fds are then TCP sockets, listed overlay "parked" in the ledger; a close reaches the other end as EOF */
/* Channels: shm */
#include "shimtest.h"

#include <sys/ioctl.h>
#include <linux/sockios.h>

#define AFTER	(1u << 20)

/* What a ring lets in unread (the library's cap: 7/8 of twice net.core.wmem_max), so a write never blocks. */
static size_t ring_cap(void)
{
	FILE *f = fopen("/proc/sys/net/core/wmem_max", "r");
	unsigned long v = 212992;

	if (f) {
		if (fscanf(f, "%lu", &v) != 1)
			v = 212992;
		fclose(f);
	}
	return v * 2 / 8 * 7;
}

static size_t min_size(size_t a, size_t b)
{
	return a < b ? a : b;
}

int main(int argc, char **argv)
{
	size_t one = min_size(3u << 20, ring_cap() * 3 / 4), other = min_size(2u << 20, ring_cap() / 2);
	int cfd, sfd, q1 = -1, q2 = -1;
	char c;

	(void)argc;
	setenv("FF_TEST_PARK_MS", "300", 1);
	t_setup_swapped_pair(argv, &cfd, &sfd);
	CHECK(t_send_stream(cfd, one, 1) == 0 && t_send_stream(sfd, other, 2) == 0,
	      "writes into the rings before the park");
	CHECK(!ioctl(cfd, SIOCOUTQ, &q1) && !ioctl(sfd, SIOCOUTQ, &q2) && (size_t)q1 == one &&
	      (size_t)q2 == other, "unread in the rings before the park: %d and %d bytes, want %zu and %zu",
	      q1, q2, one, other);
	for (int i = 0; i < 500 && (t_real_domain(cfd) != AF_INET || t_real_domain(sfd) != AF_INET); i++)
		usleep(10000);
	CHECK(t_real_domain(cfd) == AF_INET && t_real_domain(sfd) == AF_INET,
	      "5 s after the park was due the fds are of families %d and %d, not TCP sockets",
	      t_real_domain(cfd), t_real_domain(sfd));
	CHECK(t_ledger_entries(FF_PATH_OVERLAY, "parked") == 2,
	      "%d ledger entries say overlay parked, want both ends (%d still say shm)",
	      t_ledger_entries(FF_PATH_OVERLAY, "parked"), t_ledger_entries(FF_PATH_SHM, ""));
	CHECK(t_recv_stream(sfd, one, 1) == 0, "the connector's bytes written before the park");
	CHECK(t_recv_stream(cfd, other, 2) == 0, "the acceptor's bytes written before the park");
	t_both_ways(cfd, sfd, AFTER, 3, "after the park");
	CHECK(t_agent_count("park") == 2 && t_agent_count("watch parked") == 2,
	      "the agent handed %d ends and heard %d parked, want 2 and 2",
	      t_agent_count("park"), t_agent_count("watch parked"));
	close(cfd);
	CHECK(read(sfd, &c, 1) == 0, "the connector's close is not EOF at the acceptor");
	close(sfd);
	return t_exit_code();
}
