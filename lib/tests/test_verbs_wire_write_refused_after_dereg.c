/* SPDX-License-Identifier: MIT */
/* Description: across hosts a peer's WRITE whose payload is still arriving when the target deregisters the region lands no further byte there once ibv_dereg_mr returned (the rest is refused, as a NIC refuses a request on an invalidated key), though the peer sends it a byte at a time or after the program reused the memory */
/* Channels: host-tcp */
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/mman.h>

#include "verbstest.h"

#define LEN 8192

static int hostile(int sock)
{
	struct tv_end e;
	struct tv_name me, peer;
	struct ibv_mr *mr;
	uint8_t data[LEN];
	int fd;

	tv_open(&e);
	mr = tv_region(&e, 64, IBV_ACCESS_LOCAL_WRITE);
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	fd = tv_take_wire(&e, mr);
	memset(data, 'X', sizeof(data));
	tv_frame(fd, FF_VW_WRITE, LEN, peer.rkey, peer.addr, NULL);
	TV_MUST(write(fd, data, 100) == 100, "first part");
	tv_say(sock, 'w');	/* the victim deregisters now */
	tv_hear(sock, 'r');
	TV_MUST(write(fd, data + 100, LEN - 100) == LEN - 100, "the rest, after dereg");
	tv_say(sock, 'd');
	tv_hear(sock, 'k');
	return 0;
}

int main(int argc, char **argv)
{
	struct tv_end e;
	struct tv_name me, peer;
	uint8_t *region = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *mr, *rx;
	struct ibv_wc wc;
	int sock, changed = 0;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(hostile, &sock);
	tv_open(&e);
	memset(region, 0, LEN);
	mr = ibv_reg_mr(e.pd, region, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	rx = tv_region(&e, 64, IBV_ACCESS_LOCAL_WRITE);
	TV_MUST(mr, "register: %s", strerror(errno));
	tv_post_recv(&e, rx, 1);
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102, .rkey = mr->rkey, .addr = (uintptr_t)region };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	wc = tv_wait(&e);
	CHECK(wc.status == IBV_WC_SUCCESS, "the first SEND: status %d", wc.status);
	tv_hear(sock, 'w');
	usleep(200000);	/* the event thread reads the header and the first 100 bytes into the region */
	TV_MUST(ibv_dereg_mr(mr) == 0, "dereg");
	memset(region, 0, LEN);	/* the program's memory again, e.g. reused by malloc */
	tv_say(sock, 'r');
	tv_hear(sock, 'd');
	usleep(300000);
	for (int i = 100; i < LEN; i++)
		changed += region[i] == 'X';
	CHECK(!changed, "%d bytes of memory written by the peer after ibv_dereg_mr returned", changed);
	tv_say(sock, 'k');
	tv_join(pid);
	return t_exit_code();
}
