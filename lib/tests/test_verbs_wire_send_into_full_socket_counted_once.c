/* SPDX-License-Identifier: MIT */
/* Description: across hosts, SENDs whose frames fill the sender's socket exactly (64 KiB frames) while the receiver's process is stopped, and the sender polls meanwhile: all complete and arrive once it goes on (a piece whose first byte the socket refused was counted in the receiver's ring again at each try, until the sender believed the ring full for ever) */
/* Channels: host-tcp */
#include <signal.h>
#include <sys/socket.h>

#include "verbstest.h"

#define MSG	(65536 - FF_VW_HDR)	/* a frame of 64 KiB: the socket takes whole frames */
#define NMSG	48

static int receiver(int sock)
{
	struct tv_end e;
	struct ibv_mr *mr;
	struct ibv_wc wc;

	tv_open(&e);
	mr = tv_region(&e, NMSG * MSG, IBV_ACCESS_LOCAL_WRITE);
	tv_link(sock, &e);
	for (uint32_t i = 0; i < NMSG; i++) {
		struct ibv_sge r = { .addr = (uintptr_t)mr->addr + i * MSG, .length = MSG, .lkey = mr->lkey };
		struct ibv_recv_wr rw = { .wr_id = i, .sg_list = &r, .num_sge = 1 }, *rbad;

		TV_MUST(ibv_post_recv(e.qp, &rw, &rbad) == 0, "post receive %u", i);
	}
	tv_say(sock, 'r');
	for (uint32_t i = 0; i < NMSG; i++) {
		wc = tv_wait(&e);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == i && wc.byte_len == MSG,
		      "message %u: wr %llu status %d len %u", i, (unsigned long long)wc.wr_id, wc.status, wc.byte_len);
		tv_intact((uint8_t *)mr->addr + i * MSG, i, MSG, "a message");
	}
	tv_hear(sock, 'k');
	return 0;
}

int main(int argc, char **argv)
{
	struct tv_end e;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	int sock, small = 4096;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(receiver, &sock);
	tv_open(&e);
	mr = tv_region(&e, NMSG * MSG, IBV_ACCESS_LOCAL_WRITE);
	tv_link(sock, &e);
	tv_hear(sock, 'r');
	TV_MUST(setsockopt(tv_wire_await(&e), SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) == 0, "SO_SNDBUF");
	kill(pid, SIGSTOP);	/* its socket fills: our frames stop at their starts */
	for (uint32_t i = 0; i < NMSG; i++)
		tv_send(&e, mr, (uint8_t *)mr->addr + i * MSG, MSG, i);
	for (int64_t end = t_ms() + 300; t_ms() < end;)
		ibv_poll_cq(e.cq, 0, &wc);	/* a program that polls meanwhile */
	kill(pid, SIGCONT);
	for (uint32_t i = 0; i < NMSG; i++) {
		wc = tv_wait(&e);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == i, "SEND %u: wr %llu status %d", i,
		      (unsigned long long)wc.wr_id, wc.status);
	}
	tv_say(sock, 'k');
	tv_join(pid);
	return t_shim_finish();
}
