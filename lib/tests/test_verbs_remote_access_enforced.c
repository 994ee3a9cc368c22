/* SPDX-License-Identifier: MIT */
/* Description: a region allows remotely only what it was registered for: a WRITE to a read-only region, any request to a region without remote access, a READ past a region's end, an unknown rkey and a READ through a target QP whose access flags allow no remote reads complete with a remote access error and move the QP to error, where later requests complete flushed; the target's bytes stay as they were */
#include "verbstest.h"

#define QPS 5
#define LEN 8192

struct names {
	struct tv_name qp[QPS];
	uint32_t ro_rkey, local_rkey;
	uint64_t ro_addr, local_addr;
};

/* One more RC QP on e's PD and CQ, in INIT, letting remote requests do access. */
static struct ibv_qp *another_qp(struct tv_end *e, int access)
{
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC, .send_cq = e->cq, .recv_cq = e->cq,
				       .cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
						.max_recv_sge = 1 } };
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access };
	struct ibv_qp *qp = ibv_create_qp(e->pd, &ia);

	TV_MUST(qp && ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				    IBV_QP_ACCESS_FLAGS) == 0, "another QP: %s", strerror(errno));
	return qp;
}

static void connect_qp(struct tv_end *e, struct ibv_qp *qp, const struct tv_name *peer)
{
	struct ibv_qp *keep = e->qp;

	e->qp = qp;
	tv_connect(e, peer);
	e->qp = keep;
}

static int target(int sock)
{
	struct tv_end e;
	struct names me = { 0 }, peer;
	uint8_t *ro = malloc(LEN), *local = malloc(LEN);
	struct ibv_qp *qps[QPS];
	struct ibv_mr *mro, *mlocal;
	char c;

	memset(ro, 0x5a, LEN);
	memset(local, 0x6b, LEN);
	tv_open(&e);
	mro = ibv_reg_mr(e.pd, ro, LEN, IBV_ACCESS_REMOTE_READ);
	mlocal = ibv_reg_mr(e.pd, local, LEN, IBV_ACCESS_LOCAL_WRITE);
	TV_MUST(mro && mlocal, "register: %s", strerror(errno));
	/* The last QP allows no remote request, whatever the region allows. */
	for (int i = 0; i < QPS; i++) {
		qps[i] = i == 0 ? e.qp : another_qp(&e, i < QPS - 1 ? IBV_ACCESS_REMOTE_WRITE |
						     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC : 0);
		me.qp[i] = (struct tv_name){ .qpn = qps[i]->qp_num, .lid = 0x102 };
	}
	me.ro_rkey = mro->rkey, me.ro_addr = (uintptr_t)ro;
	me.local_rkey = mlocal->rkey, me.local_addr = (uintptr_t)local;
	TV_MUST(write(sock, &me, sizeof(me)) == sizeof(me) && read(sock, &peer, sizeof(peer)) == sizeof(peer),
		"trade names");
	for (int i = 0; i < QPS; i++)
		connect_qp(&e, qps[i], &peer.qp[i]);
	TV_MUST(read(sock, &c, 1) == 1, "wait for the initiator");
	for (int i = 0; i < LEN; i++)
		if (ro[i] != 0x5a || local[i] != 0x6b) {
			CHECK(0, "byte %d of a region was written: %#x %#x", i, ro[i], local[i]);
			break;
		}
	CHECK(write(sock, "k", 1) == 1, "say checked");
	return 0;
}

/* Post wr and a SEND behind it on qp: wr fails with a remote access error, the SEND is flushed. */
static void refused(struct tv_end *e, struct ibv_qp *qp, struct ibv_send_wr *wr, const char *what)
{
	struct ibv_send_wr next = { .wr_id = 77, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	struct ibv_wc wc;

	wr->send_flags = IBV_SEND_SIGNALED;
	wr->wr_id = 76;
	TV_MUST(ibv_post_send(qp, wr, &bad) == 0, "%s: post: %s", what, strerror(errno));
	wc = tv_wait(e);
	CHECK(wc.wr_id == 76 && wc.status == IBV_WC_REM_ACCESS_ERR, "%s: status %d (%s), want a remote access error",
	      what, wc.status, ibv_wc_status_str(wc.status));
	TV_MUST(ibv_post_send(qp, &next, &bad) == 0, "%s: post after the error", what);
	wc = tv_wait(e);
	CHECK(wc.wr_id == 77 && wc.status == IBV_WC_WR_FLUSH_ERR, "%s: the request after it: status %d, want flushed",
	      what, wc.status);
}

int main(int argc, char **argv)
{
	struct tv_end e;
	struct names me = { 0 }, peer;
	uint8_t *buf = malloc(LEN);
	struct ibv_qp *qps[QPS];
	struct ibv_mr *mr;
	struct ibv_sge sge;
	struct ibv_send_wr wr;
	int sock;
	pid_t pid;
	char c;

	(void)argc;
	tv_setup(argv);
	pid = tv_fork(target, &sock);
	tv_open(&e);
	mr = ibv_reg_mr(e.pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE);
	TV_MUST(mr, "register: %s", strerror(errno));
	memset(buf, 0xee, LEN);
	for (int i = 0; i < QPS; i++) {
		qps[i] = i ? another_qp(&e, 0) : e.qp;
		me.qp[i] = (struct tv_name){ .qpn = qps[i]->qp_num, .lid = 0x102 };
	}
	TV_MUST(read(sock, &peer, sizeof(peer)) == sizeof(peer) && write(sock, &me, sizeof(me)) == sizeof(me),
		"trade names");
	for (int i = 0; i < QPS; i++)
		connect_qp(&e, qps[i], &peer.qp[i]);
	sge = (struct ibv_sge){ .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	wr = (struct ibv_send_wr){ .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				   .wr.rdma = { .remote_addr = peer.ro_addr, .rkey = peer.ro_rkey } };
	refused(&e, qps[0], &wr, "WRITE to a read-only region");
	wr.opcode = IBV_WR_RDMA_READ;
	wr.wr.rdma = (typeof(wr.wr.rdma)){ .remote_addr = peer.local_addr, .rkey = peer.local_rkey };
	refused(&e, qps[1], &wr, "READ of a region without remote access");
	wr.wr.rdma = (typeof(wr.wr.rdma)){ .remote_addr = peer.ro_addr + LEN - 32, .rkey = peer.ro_rkey };
	refused(&e, qps[2], &wr, "READ past a region's end");
	wr.wr.rdma = (typeof(wr.wr.rdma)){ .remote_addr = peer.ro_addr, .rkey = peer.ro_rkey ^ 0x10000 };
	refused(&e, qps[3], &wr, "READ with an unknown rkey");
	wr.wr.rdma = (typeof(wr.wr.rdma)){ .remote_addr = peer.ro_addr, .rkey = peer.ro_rkey };
	refused(&e, qps[4], &wr, "READ through a QP that allows no remote reads");
	CHECK(write(sock, "d", 1) == 1, "say done");
	CHECK(read(sock, &c, 1) == 1 && c == 'k', "the target checked");
	tv_join(pid);
	return t_shim_finish();
}
