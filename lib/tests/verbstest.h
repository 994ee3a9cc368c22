/* SPDX-License-Identifier: MIT */
/*
 * The verbs provider's tests: the stock libibverbs, the built provider
 * (FF_VERBS, next to FF_LIBRARY) and the fake agent (fake_verbs.h), in the
 * test's own mount namespace with the device a container has
 * (docs/VERBS.md, "Discovery"): a /dev with uverbs0 and a sysfs tree. Two
 * processes, forked, each with its own device context, as two containers'
 * programs; they trade their QP's name and a region's key over a socket pair,
 * as perftest trades them over TCP.
 */
#ifndef FREEFLOW_VERBSTEST_H
#define FREEFLOW_VERBSTEST_H

#include <infiniband/verbs.h>
#include <libgen.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>

#include "freeflow/verbs_layout.h"
#include "shimtest.h"

/* A check the rest of the test cannot go on without. */
#define TV_MUST(cond, ...) do {						\
	int tv_ok_ = !!(cond);						\
	CHECK(tv_ok_, __VA_ARGS__);					\
	if (!tv_ok_)							\
		exit(T_EXIT_FAIL);					\
} while (0)

/* A file of the device's sysfs tree under t_dir. */
static inline void tv_file(const char *name, const char *val)
{
	char path[PATH_MAX], *slash;
	FILE *f;

	t_path(path, sizeof(path), name);
	for (slash = path + strlen(t_dir) + 1; (slash = strchr(slash, '/')); slash++) {
		*slash = 0;
		mkdir(path, 0755);
		*slash = '/';
	}
	f = fopen(path, "w");
	CHECK(f && fprintf(f, "%s\n", val) > 0 && fclose(f) == 0, "write %s", path);
}

/*
 * Stage 2 of t_shim_setup (the fake agent up, in the test's pid and mount
 * namespaces): the device, and libibverbs pointed at it and the provider.
 */
static inline void tv_setup(char **argv)
{
	char lib[PATH_MAX], drv[PATH_MAX + 16], sys[PATH_MAX];

	t_shim_setup(argv, FA_BROKER);
	TV_MUST(mount("tmpfs", "/dev", "tmpfs", MS_NOSUID, "mode=755") == 0 &&
	      mknod("/dev/null", S_IFCHR | 0666, makedev(1, 3)) == 0 &&
	      mknod("/dev/urandom", S_IFCHR | 0666, makedev(1, 9)) == 0 &&
	      mkdir("/dev/infiniband", 0755) == 0 &&
	      mknod("/dev/infiniband/uverbs0", S_IFCHR | 0666, makedev(1, 3)) == 0,
	      "a /dev with uverbs0: %s", strerror(errno));
	tv_file("sys/class/infiniband_verbs/abi_version", "6");
	tv_file("sys/class/infiniband_verbs/uverbs0/ibdev", "ffv0");
	tv_file("sys/class/infiniband_verbs/uverbs0/dev", "1:3");
	tv_file("sys/class/infiniband_verbs/uverbs0/abi_version", "1");
	tv_file("sys/class/infiniband/ffv0/node_type", "1: CA");
	tv_file("sys/class/infiniband/ffv0/node_guid", "02ff:ff00:0af4:0102");
	tv_file("sys/class/infiniband/ffv0/ports/1/lid", "0x102");
	tv_file("sys/class/infiniband/ffv0/ports/1/gids/0", "0000:0000:0000:0000:0000:ffff:0af4:0102");
	tv_file("sys/class/infiniband/ffv0/ports/1/pkeys/0", "0xffff");
	t_path(sys, sizeof(sys), "sys");
	setenv("SYSFS_PATH", sys, 1);
	TV_MUST(realpath(getenv("FF_LIBRARY"), lib), "FF_LIBRARY %s", getenv("FF_LIBRARY"));
	snprintf(drv, sizeof(drv), "%s/libffv", dirname(lib));
	setenv("RDMAV_DRIVERS", drv, 1);
}

/* What one side tells the other: its QP, and a region for one-sided requests. */
struct tv_name {
	uint32_t qpn;
	uint16_t lid;
	uint32_t rkey;
	uint64_t addr;
};

struct tv_end {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
};

/* Open the device; a PD and a CQ (with a completion channel, into *ch, if ch). */
static inline void tv_device(struct tv_end *e, struct ibv_comp_channel **ch)
{
	struct ibv_device **list = ibv_get_device_list(NULL);

	TV_MUST(list && list[0], "no verbs device: %s", strerror(errno));
	e->ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	TV_MUST(e->ctx, "open the device: %s", strerror(errno));
	if (ch)
		TV_MUST((*ch = ibv_create_comp_channel(e->ctx)), "create a completion channel: %s",
			strerror(errno));
	e->pd = ibv_alloc_pd(e->ctx);
	e->cq = ibv_create_cq(e->ctx, 256, e, ch ? *ch : NULL, 0);
	TV_MUST(e->pd && e->cq, "PD, CQ: %s", strerror(errno));
}

/* An RC QP on e's PD and CQ, in INIT, taking its receives from srq if not NULL. */
static inline void tv_qp_srq(struct tv_end *e, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC, .send_cq = e->cq, .recv_cq = e->cq,
				       .srq = srq,
				       .cap = { .max_send_wr = 64, .max_recv_wr = 64,
						.max_send_sge = 4, .max_recv_sge = 4 } };
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
						    IBV_ACCESS_REMOTE_ATOMIC };

	e->qp = ibv_create_qp(e->pd, &ia);
	TV_MUST(e->qp, "create an RC QP: %s", strerror(errno));
	TV_MUST(ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			    IBV_QP_ACCESS_FLAGS) == 0, "QP to INIT");
}

static inline void tv_qp(struct tv_end *e)
{
	tv_qp_srq(e, NULL);
}

/* The device, a PD, a CQ (with a completion channel if ch) and an RC QP in INIT. */
static inline void tv_open_ch(struct tv_end *e, struct ibv_comp_channel **ch)
{
	tv_device(e, ch);
	tv_qp(e);
}

static inline void tv_open(struct tv_end *e)
{
	tv_open_ch(e, NULL);
}

/*
 * The device, a PD, a CQ and an RC QP in INIT of nsend send and nrecv
 * receive requests of one SGE, remote READs allowed: for the tests that
 * keep more requests out than tv_qp's QP takes.
 */
static inline void tv_open_deep(struct tv_end *e, uint32_t nsend, uint32_t nrecv)
{
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_RC, .cap = { .max_send_wr = nsend, .max_recv_wr = nrecv,
								     .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_READ };

	tv_device(e, NULL);
	ia.send_cq = ia.recv_cq = e->cq;
	e->qp = ibv_create_qp(e->pd, &ia);
	TV_MUST(e->qp && ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				       IBV_QP_ACCESS_FLAGS) == 0, "an RC QP of %u send requests in INIT: %s", nsend,
		strerror(errno));
}

/* INIT -> RTR -> RTS towards the peer's QP, with our RNR timer and retries to the peer's. */
static inline void tv_connect_rnr(struct tv_end *e, const struct tv_name *peer, uint8_t min_rnr_timer,
				  uint8_t rnr_retry)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096,
				 .dest_qp_num = peer->qpn, .max_dest_rd_atomic = 1,
				 .min_rnr_timer = min_rnr_timer, .ah_attr = { .dlid = peer->lid, .port_num = 1 } };

	TV_MUST(ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0,
	      "QP to RTR");
	a = (struct ibv_qp_attr){ .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
				  .rnr_retry = rnr_retry, .max_rd_atomic = 1 };
	TV_MUST(ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0,
	      "QP to RTS");
}

/* len bytes, malloc'd and registered on e's PD with access (the buffer is mr->addr). */
static inline struct ibv_mr *tv_region(struct tv_end *e, size_t len, int access)
{
	void *buf = malloc(len);
	struct ibv_mr *mr = buf ? ibv_reg_mr(e->pd, buf, len, access) : NULL;

	TV_MUST(mr, "register %zu bytes: %s", len, strerror(errno));
	return mr;
}

/* An SRQ of max_wr receives of one SGE on e's PD, its context ctx. */
static inline struct ibv_srq *tv_srq(struct tv_end *e, uint32_t max_wr, void *ctx)
{
	struct ibv_srq_init_attr a = { .attr = { .max_wr = max_wr, .max_sge = 1 }, .srq_context = ctx };
	struct ibv_srq *srq = ibv_create_srq(e->pd, &a);

	TV_MUST(srq, "create an SRQ: %s", strerror(errno));
	return srq;
}

/* INIT -> RTR -> RTS towards the peer's QP, retrying RNR for ever (as perftest). */
static inline void tv_connect(struct tv_end *e, const struct tv_name *peer)
{
	tv_connect_rnr(e, peer, 12, 7);
}

/* One completion within 10 s (a hang fails the test, not the suite). */
static inline struct ibv_wc tv_wait(struct tv_end *e)
{
	struct ibv_wc wc = { .status = IBV_WC_GENERAL_ERR };
	int64_t end = t_ms() + 10000;
	int n;

	while ((n = ibv_poll_cq(e->cq, 1, &wc)) == 0 && t_ms() < end)
		;
	TV_MUST(n == 1, "no completion within 10 s (poll gave %d)", n);
	return wc;
}

/* Swap names with the other process over sock. */
static inline struct tv_name tv_trade(int sock, const struct tv_name *mine)
{
	struct tv_name theirs = { 0 };

	TV_MUST(write(sock, mine, sizeof(*mine)) == sizeof(*mine) &&
	      read(sock, &theirs, sizeof(theirs)) == sizeof(theirs), "trade names");
	return theirs;
}

/* e's QP name for the other process's over sock, and e connected to that QP; its name. */
static inline struct tv_name tv_link(int sock, struct tv_end *e)
{
	struct tv_name me = { .qpn = e->qp->qp_num, .lid = 0x102 }, peer = tv_trade(sock, &me);

	tv_connect(e, &peer);
	return peer;
}

/* Fork the peer: peer(sock) runs in the child, whose exit code tv_join checks. */
static inline pid_t tv_fork(int (*peer)(int sock), int *sock)
{
	int sp[2];
	pid_t pid;

	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0, "socketpair");
	pid = fork();
	if (pid == 0) {
		close(sp[0]);
		_exit(peer(sp[1]) ? T_EXIT_FAIL : t_exit_code());
	}
	close(sp[1]);
	*sock = sp[0];
	return pid;
}

static inline void tv_join(pid_t pid)
{
	int st;

	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	      "the peer process failed (status %#x)", st);
}

/* A byte only the sender's pattern puts at i. */
static inline uint8_t tv_pattern(uint32_t seed, size_t i)
{
	return (uint8_t)(i * 131 + seed * 7 + (i >> 9));
}

/* One event within 10 s, for e's CQ; a hang fails the test, not the suite. */
static inline void tv_event(struct tv_end *e, struct ibv_comp_channel *ch, const char *what)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct ibv_cq *cq = NULL;
	void *cq_ctx = NULL;

	TV_MUST(poll(&p, 1, 10000) == 1, "%s: no completion event within 10 s", what);
	TV_MUST(ibv_get_cq_event(ch, &cq, &cq_ctx) == 0, "%s: ibv_get_cq_event: %s", what,
		strerror(errno));
	CHECK(cq == e->cq && cq_ctx == e, "%s: the event names CQ %p context %p, want %p %p", what,
	      (void *)cq, cq_ctx, (void *)e->cq, (void *)e);
}

/* Whether the channel holds no event now. */
static inline int tv_no_event(struct ibv_comp_channel *ch)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };

	return poll(&p, 1, 0) == 0;
}

/* A receive of the whole of mr, as wr id. */
static inline void tv_post_recv(struct tv_end *e, struct ibv_mr *mr, uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)mr->addr, .length = (uint32_t)mr->length,
			       .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;

	TV_MUST(ibv_post_recv(e->qp, &wr, &bad) == 0, "post receive %llu", (unsigned long long)id);
}

/* Whether buf holds the len bytes of tv_pattern(seed); the first wrong one is named. */
static inline int tv_intact(const uint8_t *buf, uint32_t seed, uint32_t len, const char *what)
{
	for (uint32_t k = 0; k < len; k++)
		if (buf[k] != tv_pattern(seed, k)) {
			CHECK(0, "%s: byte %u of %u is %#x, want %#x", what, k, len, buf[k],
			      tv_pattern(seed, k));
			return 0;
		}
	return 1;
}

/* A receive completion, polled: message id of len bytes, intact. */
static inline void tv_got(struct tv_end *e, struct ibv_mr *mr, uint64_t id, uint32_t len)
{
	struct ibv_wc wc = tv_wait(e);

	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.wr_id == id &&
	      wc.byte_len == len, "receive %llu: status %d opcode %d wr_id %llu len %u",
	      (unsigned long long)id, wc.status, wc.opcode, (unsigned long long)wc.wr_id, wc.byte_len);
	tv_intact(mr->addr, (uint32_t)id, len, "receive");
}

/* A receive of [buf, buf + len) of mr into srq, as wr id. */
static inline void tv_post_srq(struct ibv_srq *srq, struct ibv_mr *mr, uint8_t *buf, uint32_t len,
			       uint64_t id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 }, *bad;

	TV_MUST(ibv_post_srq_recv(srq, &wr, &bad) == 0, "post SRQ receive %llu: %s",
		(unsigned long long)id, strerror(errno));
}

/* A signaled SEND of the len bytes at buf (in mr), filled with tv_pattern(seed) first. */
static inline void tv_send(struct tv_end *e, struct ibv_mr *mr, uint8_t *buf, uint32_t len,
			   uint32_t seed)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = seed, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;

	for (uint32_t k = 0; k < len; k++)
		buf[k] = tv_pattern(seed, k);
	TV_MUST(ibv_post_send(e->qp, &wr, &bad) == 0, "post send %u: %s", seed, strerror(errno));
}

/* One byte of the test's own protocol over sock, and the wait for one. */
static inline void tv_say(int sock, char c)
{
	TV_MUST(write(sock, &c, 1) == 1, "say %c", c);
}

static inline void tv_hear(int sock, char want)
{
	char c = 0;

	TV_MUST(read(sock, &c, 1) == 1 && c == want, "wait for %c (got %c)", want, c);
}

#define TV_QKEY	0x11111111u

/* A UD QP on e's PD and CQ, in RTS, with Q_Key TV_QKEY. */
static inline void tv_ud_qp(struct tv_end *e)
{
	struct ibv_qp_init_attr ia = { .qp_type = IBV_QPT_UD, .send_cq = e->cq, .recv_cq = e->cq,
				       .cap = { .max_send_wr = 64, .max_recv_wr = 64,
						.max_send_sge = 2, .max_recv_sge = 2 } };
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qkey = TV_QKEY };

	e->qp = ibv_create_qp(e->pd, &ia);
	TV_MUST(e->qp, "create a UD QP: %s", strerror(errno));
	/* As on hardware: INIT needs the Q_Key. */
	CHECK(ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT) != 0,
	      "a UD QP went to INIT without a Q_Key");
	TV_MUST(ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			      IBV_QP_QKEY) == 0, "UD QP to INIT");
	a.qp_state = IBV_QPS_RTR;
	TV_MUST(ibv_modify_qp(e->qp, &a, IBV_QP_STATE) == 0, "UD QP to RTR");
	a.qp_state = IBV_QPS_RTS;
	TV_MUST(ibv_modify_qp(e->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0, "UD QP to RTS");
}

static inline struct ibv_ah *tv_ah(struct tv_end *e, int global)
{
	struct ibv_ah_attr a = { .dlid = 0x102, .port_num = 1, .is_global = global };
	struct ibv_ah *ah;

	if (global) {
		a.grh.hop_limit = 1;
		TV_MUST(ibv_query_gid(e->ctx, 1, 0, &a.grh.dgid) == 0, "query GID 0");
	}
	ah = ibv_create_ah(e->pd, &a);
	TV_MUST(ah, "create an address handle: %s", strerror(errno));
	return ah;
}

/* A datagram of len bytes (the pattern of seed) to qpn through ah; its send completion's status. */
static inline enum ibv_wc_status tv_send_dgram(struct tv_end *e, struct ibv_qp *qp, struct ibv_mr *mr,
						    struct ibv_ah *ah, uint32_t qpn, uint32_t qkey, uint32_t len,
						    uint32_t seed)
{
	struct ibv_sge sge = { .addr = (uintptr_t)mr->addr, .length = len, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = seed, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND_WITH_IMM, .imm_data = htonl(seed),
				  .send_flags = IBV_SEND_SIGNALED,
				  .wr.ud = { .ah = ah, .remote_qpn = qpn, .remote_qkey = qkey } }, *bad;
	struct ibv_wc wc;

	for (uint32_t k = 0; k < len; k++)
		((uint8_t *)mr->addr)[k] = tv_pattern(seed, k);
	TV_MUST(ibv_post_send(qp, &wr, &bad) == 0, "post datagram %u: %s", seed, strerror(errno));
	wc = tv_wait(e);
	CHECK(wc.wr_id == seed && wc.opcode == IBV_WC_SEND, "datagram %u: completion wr_id %llu op %d",
	      seed, (unsigned long long)wc.wr_id, wc.opcode);
	return wc.status;
}

/*
 * For the hostile-peer tests: the ring of ours another process reads
 * (a QP-layout mapping named ffv-qp whose prod is not 0: we produced into
 * it), to write records into by hand.
 */
static inline uint8_t *tv_written_ring(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	uint8_t *found = NULL;

	while (f && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (strstr(line, "ffv-qp") && sscanf(line, "%lx-%lx", &lo, &hi) == 2 &&
		    *(uint64_t *)(lo + FF_VQP_OFF_PROD) != 0)
			found = (uint8_t *)lo;
	}
	if (f)
		fclose(f);
	return found;
}

/* A record header at at (docs/VERBS.md, "Queue pair memory"); total is a lane's Q_Key. */
static inline void tv_rec(uint8_t *at, uint32_t len, uint8_t op, uint8_t flags, uint32_t total)
{
	memset(at, 0, 16);
	memcpy(at, &len, 4);
	at[4] = op;
	at[5] = flags;
	memcpy(at + 12, &total, 4);
}

/*
 * The only TCP socket of this process: across hosts (FF_TEST_CHANNEL
 * host-tcp), its end of the connection a QP or a UD lane has to its peer.
 */
static inline int tv_wire_socket(void)
{
	int found = -1;

	for (int fd = 3; fd < 1024; fd++) {
		int dom = 0, typ = 0;
		socklen_t l = sizeof(int);

		if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &l) == 0 &&
		    getsockopt(fd, SOL_SOCKET, SO_TYPE, &typ, &l) == 0 && dom == AF_INET && typ == SOCK_STREAM) {
			TV_MUST(found < 0, "two TCP sockets (%d, %d)", found, fd);
			found = fd;
		}
	}
	TV_MUST(found >= 0, "no connection to the peer");
	return found;
}

/*
 * tv_wire_socket once e's QP has its end: when its peer connected second,
 * the end comes on the provider's event thread (rung by the agent) or at a
 * poll, maybe after the peer's first request completed. Within 2 s.
 */
static inline int tv_wire_await(struct tv_end *e)
{
	for (int k = 0; k < 2000; k++) {
		for (int fd = 3; fd < 1024; fd++) {
			int dom = 0;
			socklen_t l = sizeof(int);

			if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &l) == 0 && dom == AF_INET)
				return tv_wire_socket();
		}
		ibv_poll_cq(e->cq, 0, NULL);
		usleep(1000);
	}
	return tv_wire_socket();
}

/*
 * A hostile peer's own end of its QP's connection to e's peer (across
 * hosts): a real SEND from mr's first 3 bytes makes the connection, then the
 * device is closed, so the provider reads it no more (destroying the QP
 * would end it). Blocking.
 */
static inline int tv_take_wire(struct tv_end *e, struct ibv_mr *mr)
{
	struct ibv_sge sge = { .addr = (uintptr_t)mr->addr, .length = 3, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	int fd;

	TV_MUST(ibv_post_send(e->qp, &wr, &bad) == 0 && tv_wait(e).status == IBV_WC_SUCCESS, "the first SEND");
	fd = dup(tv_wire_socket());
	TV_MUST(fd >= 0 && ibv_close_device(e->ctx) == 0 && fcntl(fd, F_SETFL, 0) == 0, "take the connection");
	return fd;
}

/* A frame of the provider's wire protocol written by hand: its header, then data (len bytes) unless NULL. */
static inline void tv_frame(int fd, uint8_t op, uint32_t len, uint32_t rkey, uint64_t raddr, const void *data)
{
	uint8_t h[FF_VW_HDR] = { 0 };

	h[FF_VW_OP] = op;
	memcpy(h + FF_VW_LEN, &len, 4);
	memcpy(h + FF_VW_RKEY, &rkey, 4);
	memcpy(h + FF_VW_RADDR, &raddr, 8);
	TV_MUST(write(fd, h, sizeof(h)) == sizeof(h), "write a frame header: %s", strerror(errno));
	if (data)
		TV_MUST(write(fd, data, len) == (ssize_t)len, "write a frame's payload");
}

#endif
