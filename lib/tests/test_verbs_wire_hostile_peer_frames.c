/* SPDX-License-Identifier: MIT */
/* Description: across hosts, a hostile peer that writes its own frames on the connection (not its provider's) reaches only what a NIC would let it: a WRITE inside the region the victim granted lands, one past the region's end or with an rkey the victim never gave is refused with a NAK and touches nothing (the bytes beside the region on its pages stay), and a frame that makes no sense (an answer to a READ never asked, of 1 GiB) fails the victim's QP without a hang or a crash: its receives are flushed */
/* Channels: host-tcp */
#include <netinet/in.h>
#include <sys/socket.h>

#include "verbstest.h"

#define OFF 100		/* the region starts mid-page, with bytes of the victim beside it */
#define LEN 1000

static int hostile(int sock)
{
	struct tv_end e;
	struct tv_name me, peer;
	struct ibv_mr *mr = NULL;
	uint8_t ans[FF_VW_HDR], junk[64];
	int fd;

	tv_open(&e);
	mr = tv_region(&e, 64, IBV_ACCESS_LOCAL_WRITE);
	strcpy(mr->addr, "hi");
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102 };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	fd = tv_take_wire(&e, mr);
	tv_frame(fd, FF_VW_WRITE, 8, peer.rkey, peer.addr + 8, "hostile!");
	tv_frame(fd, FF_VW_WRITE, 8, peer.rkey, peer.addr + LEN - 4, "past-end");
	tv_frame(fd, FF_VW_WRITE, 8, peer.rkey + 1, peer.addr, "bad-rkey");
	for (int i = 0; i < 2; i++) {
		uint64_t st = 0;

		TV_MUST(recv(fd, ans, sizeof(ans), MSG_WAITALL) == sizeof(ans), "answer %d: %s", i, strerror(errno));
		memcpy(&st, ans + FF_VW_ARG1, 8);
		CHECK(ans[FF_VW_OP] == FF_VW_NAK && st == IBV_WC_REM_ACCESS_ERR,
		      "answer %d: op %d status %llu, want a NAK with a remote access error", i, ans[FF_VW_OP],
		      (unsigned long long)st);
	}
	memset(junk, 0, sizeof(junk));
	tv_frame(fd, FF_VW_READ_RESP, 1u << 30, 0, 0, NULL);
	TV_MUST(write(fd, junk, sizeof(junk)) == sizeof(junk), "the start of 1 GiB");
	CHECK(recv(fd, ans, sizeof(ans), 0) == 0, "the victim ends the connection");
	tv_say(sock, 'd');
	tv_hear(sock, 'k');
	return 0;
}

int main(int argc, char **argv)
{
	struct tv_end e;
	struct tv_name me, peer;
	uint8_t *page = aligned_alloc(4096, 8192), *region = page + OFF;
	struct ibv_mr *mr, *rx;
	struct ibv_wc wc;
	int sock;
	pid_t pid;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(hostile, &sock);
	tv_open(&e);
	memset(page, 0xee, 8192);
	mr = ibv_reg_mr(e.pd, region, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	rx = tv_region(&e, 64, IBV_ACCESS_LOCAL_WRITE);
	TV_MUST(mr, "register: %s", strerror(errno));
	tv_post_recv(&e, rx, 1);
	tv_post_recv(&e, rx, 2);
	me = (struct tv_name){ .qpn = e.qp->qp_num, .lid = 0x102, .rkey = mr->rkey, .addr = (uintptr_t)region };
	peer = tv_trade(sock, &me);
	tv_connect(&e, &peer);
	tv_hear(sock, 'd');
	wc = tv_wait(&e);
	CHECK(wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS && !strcmp((char *)rx->addr, "hi"),
	      "the real SEND: wr %llu status %d", (unsigned long long)wc.wr_id, wc.status);
	wc = tv_wait(&e);
	CHECK(wc.wr_id == 2 && wc.status == IBV_WC_WR_FLUSH_ERR,
	      "after the nonsense frame: wr %llu status %d, want flushed", (unsigned long long)wc.wr_id, wc.status);
	CHECK(memcmp(region + 8, "hostile!", 8) == 0, "the WRITE inside the region did not land");
	for (int i = 0; i < 8192; i++)
		if ((page + i < region || page + i >= region + LEN) && page[i] != 0xee) {
			CHECK(0, "byte %d beside the region changed to %#x", i - OFF, page[i]);
			break;
		}
	for (int i = 0; i < LEN; i++)
		if ((i < 8 || i >= 16) && region[i] != 0xee) {
			CHECK(0, "byte %d of the region changed to %#x by a refused WRITE", i, region[i]);
			break;
		}
	tv_say(sock, 'k');
	tv_join(pid);
	return t_exit_code();
}
