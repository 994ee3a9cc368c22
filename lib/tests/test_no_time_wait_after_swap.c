/* SPDX-License-Identifier: MIT */
/* Description: a swapped connection leaves no TIME_WAIT behind on the overlay (the accepting end resets the overlay connection as it drops it), so a client making many short connections keeps its port range, while the SO_LINGER the program chose still reaches the channel */
/* Channels: unix host-tcp */
#include "shimtest.h"

#define ROUNDS	20
#define LINGER	7

/* A pair accepted on a listener with SO_LINGER on (inherited by what it accepts). */
static void lingering_pair(int *cfd, int *sfd)
{
	struct linger lg = { .l_onoff = 1, .l_linger = LINGER };
	struct t_conn_arg a = { .family = AF_INET };
	int lfd = t_listen(AF_INET, &a.port);
	pthread_t th;

	CHECK(setsockopt(lfd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0, "SO_LINGER");
	pthread_create(&th, NULL, t_connect_thread, &a);
	*sfd = accept(lfd, NULL, NULL);
	pthread_join(th, NULL);
	*cfd = a.fd;
	close(lfd);
}

int main(int argc, char **argv)
{
	uint16_t cport[ROUNDS], sport[ROUNDS];
	struct linger lg = { 0 };
	socklen_t l = sizeof(lg);
	int cfd, sfd, waiting = 0;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	for (int i = 0; i < ROUNDS; i++) {
		t_pair(AF_INET, &cfd, &sfd);
		CHECK(t_swapped(cfd) && t_swapped(sfd), "round %d: not swapped", i);
		cport[i] = t_port_of(cfd, 0);	/* the overlay ports, as the shim answers */
		sport[i] = t_port_of(cfd, 1);
		close(cfd);
		close(sfd);
	}
	lingering_pair(&cfd, &sfd);
	CHECK(t_swapped(sfd), "lingering pair: not swapped");
	CHECK(t_raw(SYS_getsockopt, sfd, SOL_SOCKET, SO_LINGER, &lg, &l) == 0 && lg.l_onoff &&
	      lg.l_linger == LINGER, "the channel's SO_LINGER is %d/%d, want the program's 1/%d",
	      lg.l_onoff, lg.l_linger, LINGER);
	close(cfd);
	close(sfd);
	usleep(100 * 1000);	/* a TIME_WAIT would be there within microseconds, for 60 s */
	for (int i = 0; i < ROUNDS; i++)
		waiting += (t_tcp_state(cport[i], sport[i]) == T_TCP_TIME_WAIT) +
			   (t_tcp_state(sport[i], cport[i]) == T_TCP_TIME_WAIT);
	CHECK(waiting == 0, "%d ends of %d swapped connections are in TIME_WAIT", waiting, ROUNDS);
	return t_shim_finish();
}
