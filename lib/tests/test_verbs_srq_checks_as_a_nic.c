/* SPDX-License-Identifier: MIT */
/* Description: an SRQ's verbs check what a NIC checks: sizes past the device's limits fail with EINVAL; post_srq_recv fails with EINVAL past max_sge and ENOMEM when full, naming the request; a resize keeps every posted receive and may not drop below them; srq_limit past max_wr fails, query_srq gives back what was set; a QP made with the SRQ reports it in query_qp (a QP of another context may not use it: EINVAL), has no receive queue of its own (post_recv: EINVAL); destroy_srq fails with EBUSY while a QP uses it */
#include "verbstest.h"

/* A chain of n receives of one 64-byte SGE each (num_sge SGEs for the last), ids from id. */
static int post(struct ibv_srq *srq, struct ibv_mr *mr, int n, uint64_t id, int num_sge,
		uint64_t *bad_id)
{
	struct ibv_sge sge[4];
	struct ibv_recv_wr wr[16], *bad = NULL;
	int r;

	for (int i = 0; i < 4; i++)
		sge[i] = (struct ibv_sge){ .addr = (uintptr_t)mr->addr + 64 * i, .length = 64,
					   .lkey = mr->lkey };
	for (int i = 0; i < n; i++)
		wr[i] = (struct ibv_recv_wr){ .wr_id = id + i, .sg_list = sge,
					      .num_sge = i == n - 1 ? num_sge : 1,
					      .next = i == n - 1 ? NULL : &wr[i + 1] };
	r = ibv_post_srq_recv(srq, wr, &bad);
	*bad_id = bad ? bad->wr_id : ~0ull;
	return r;
}

int main(int argc, char **argv)
{
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 0, .max_sge = 1 } };
	struct ibv_srq_attr attr;
	struct ibv_qp_init_attr init;
	struct ibv_qp_attr qa;
	struct ibv_recv_wr rwr = { .wr_id = 1 }, *rbad;
	struct ibv_srq *srq;
	struct ibv_mr *mr;
	struct ibv_qp_init_attr ia;
	struct tv_end e, other;
	uint64_t bad;
	static uint8_t buf[256];

	(void)argc;
	tv_setup(argv);
	tv_device(&e, NULL);
	mr = ibv_reg_mr(e.pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	TV_MUST(mr, "register: %s", strerror(errno));

	CHECK(!ibv_create_srq(e.pd, &sa) && errno == EINVAL, "an SRQ of 0 receives: errno %d", errno);
	sa.attr = (struct ibv_srq_attr){ .max_wr = 4, .max_sge = 33 };
	CHECK(!ibv_create_srq(e.pd, &sa) && errno == EINVAL, "an SRQ of 33 SGEs: errno %d", errno);
	sa.attr = (struct ibv_srq_attr){ .max_wr = 4, .max_sge = 2, .srq_limit = 3 };
	srq = ibv_create_srq(e.pd, &sa);
	TV_MUST(srq, "create an SRQ: %s", strerror(errno));
	TV_MUST(ibv_query_srq(srq, &attr) == 0, "query the SRQ");
	CHECK(attr.max_wr == 4 && attr.max_sge == 2 && attr.srq_limit == 0,
	      "query_srq: max_wr %u max_sge %u srq_limit %u, want 4 2 0 (a limit is armed by modify only)",
	      attr.max_wr, attr.max_sge, attr.srq_limit);

	CHECK(post(srq, mr, 2, 10, 3, &bad) == EINVAL && bad == 11,
	      "3 SGEs where max_sge is 2: want EINVAL naming 11, got bad %llu", (unsigned long long)bad);
	CHECK(post(srq, mr, 4, 20, 2, &bad) == ENOMEM && bad == 23,
	      "5 receives where max_wr is 4: want ENOMEM naming 23, got bad %llu", (unsigned long long)bad);

	attr = (struct ibv_srq_attr){ .max_wr = 3 };
	CHECK(ibv_modify_srq(srq, &attr, IBV_SRQ_MAX_WR) == EINVAL,
	      "a resize below the 4 receives posted succeeded");
	attr = (struct ibv_srq_attr){ .max_wr = 8 };
	CHECK(ibv_modify_srq(srq, &attr, IBV_SRQ_MAX_WR) == 0, "resize to 8");
	CHECK(post(srq, mr, 5, 30, 1, &bad) == ENOMEM && bad == 34,
	      "after the resize, 4 more fit and the fifth fails: bad %llu", (unsigned long long)bad);
	attr = (struct ibv_srq_attr){ .srq_limit = 9 };
	CHECK(ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT) == EINVAL, "a limit past max_wr succeeded");
	attr = (struct ibv_srq_attr){ .srq_limit = 3 };
	CHECK(ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT) == 0, "arm the limit at 3");
	TV_MUST(ibv_query_srq(srq, &attr) == 0, "query the SRQ");
	CHECK(attr.max_wr == 8 && attr.srq_limit == 3, "query_srq: max_wr %u srq_limit %u, want 8 3",
	      attr.max_wr, attr.srq_limit);

	tv_qp_srq(&e, srq);
	TV_MUST(ibv_query_qp(e.qp, &qa, IBV_QP_CAP, &init) == 0, "query the QP");
	CHECK(init.srq == srq && init.cap.max_recv_wr == 0 && e.qp->srq == srq,
	      "query_qp: srq %p (want %p), max_recv_wr %u", (void *)init.srq, (void *)srq,
	      init.cap.max_recv_wr);
	CHECK(ibv_post_recv(e.qp, &rwr, &rbad) == EINVAL && rbad == &rwr,
	      "post_recv on a QP with an SRQ did not fail with EINVAL");
	CHECK(ibv_destroy_srq(srq) == EBUSY, "destroy_srq while a QP uses it did not fail with EBUSY");
	/* Another context of the device (another process's, as the kernel sees it) may not use it. */
	tv_device(&other, NULL);
	ia = (struct ibv_qp_init_attr){ .qp_type = IBV_QPT_RC, .send_cq = other.cq,
					.recv_cq = other.cq, .srq = srq, .cap = { .max_send_wr = 1 } };
	CHECK(!ibv_create_qp(other.pd, &ia) && errno == EINVAL,
	      "a QP of another context with this SRQ: errno %d, want EINVAL", errno);
	CHECK(ibv_destroy_qp(e.qp) == 0, "destroy the QP");
	CHECK(ibv_destroy_srq(srq) == 0, "destroy the SRQ once no QP uses it");
	return t_shim_finish();
}
