/* SPDX-License-Identifier: MIT */
/*
 * The provider's device and context: registration with libibverbs, the
 * device's identity from the container's sysfs tree, device and port
 * queries, and the table of the verbs the other files serve. Verbs not in
 * it are libibverbs' own defaults, which fail with EOPNOTSUPP.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <endian.h>

#include "verbs/verbs.h"

#define FFV_MAX_MSG	(1u << 31)	/* as a hardware port's max_msg_sz */
/*
 * No IEEE OUI is ours: a locally administered one (the node GUID's first
 * bytes), nonzero as a device's must be, and unknown to perftest, which then
 * uses the plain post-send calls.
 */
#define FFV_VENDOR_ID	0x02ffff
#define FFV_FW_VER	"freeflow-0.1"

/* The first line of dir/name, or -errno. */
static int read_line(const char *dir, const char *name, char *buf, size_t size)
{
	char path[IBV_SYSFS_PATH_MAX + 64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, size - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	buf[strcspn(buf, "\n")] = 0;
	return 0;
}

/* The LID `freeflow run` gave this container's port: ports/1/lid, "0x" hex. */
static int read_lid(const char *ibdev_path, uint16_t *lid)
{
	char buf[32], *end;
	unsigned long v;
	int err = read_line(ibdev_path, "ports/1/lid", buf, sizeof(buf));

	if (err)
		return err;
	errno = 0;
	v = strtoul(buf, &end, 16);
	if (errno || end == buf || *end || v == 0 || v >= 0xc000)
		return -EINVAL;	/* a unicast LID is 1..0xbfff */
	*lid = (uint16_t)v;
	return 0;
}

/*
 * The node GUID from node_guid, "xxxx:xxxx:xxxx:xxxx" (not from sysfs->node_guid:
 * the struct's fields past ibdev_path are not the same in every release of
 * the private ABI).
 */
static int read_guid(const char *ibdev_path, uint64_t *guid)
{
	char buf[64];
	unsigned g[4];
	int err = read_line(ibdev_path, "node_guid", buf, sizeof(buf));

	if (err)
		return err;
	if (sscanf(buf, "%4x:%4x:%4x:%4x", &g[0], &g[1], &g[2], &g[3]) != 4)
		return -EINVAL;
	*guid = (uint64_t)g[0] << 48 | (uint64_t)g[1] << 32 | (uint64_t)g[2] << 16 | g[3];
	return 0;
}

/* GID 0 from ports/1/gids/0, eight groups of four hex digits, into network order. */
static int read_gid(const char *ibdev_path, uint8_t gid[16])
{
	char buf[64];
	unsigned g[8];
	int err = read_line(ibdev_path, "ports/1/gids/0", buf, sizeof(buf));

	if (err)
		return err;
	if (sscanf(buf, "%4x:%4x:%4x:%4x:%4x:%4x:%4x:%4x", &g[0], &g[1], &g[2], &g[3], &g[4], &g[5],
		   &g[6], &g[7]) != 8)
		return -EINVAL;
	for (int i = 0; i < 8; i++) {
		gid[2 * i] = (uint8_t)(g[i] >> 8);
		gid[2 * i + 1] = (uint8_t)g[i];
	}
	return 0;
}

static struct verbs_device *alloc_device(struct verbs_sysfs_dev *sysfs)
{
	struct ffv_device *d;
	uint64_t guid;
	uint16_t lid;
	uint8_t gid[16];
	int err = read_lid(sysfs->ibdev_path, &lid);

	if (!err)
		err = read_guid(sysfs->ibdev_path, &guid);
	if (!err)
		err = read_gid(sysfs->ibdev_path, gid);
	if (err) {
		fprintf(stderr, "libffv: %s's ports/1/lid, node_guid or ports/1/gids/0 under %s is missing or bad (%s); "
			"the container's verbs device is made by `freeflow run`\n", sysfs->ibdev_name,
			sysfs->ibdev_path, strerror(-err));
		return NULL;
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->lid = lid;
	d->node_guid = htobe64(guid);
	memcpy(d->gid, gid, 16);
	return &d->vdev;
}

static void uninit_device(struct verbs_device *vdev)
{
	free(ffv_dev(&vdev->device));
}

static int query_device_ex(struct ibv_context *ctx, const struct ibv_query_device_ex_input *input,
			   struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ffv_device *d = ffv_dev(ctx->device);
	struct ibv_device_attr *a = &attr->orig_attr;

	if (input && input->comp_mask)
		return EINVAL;
	if (attr_size < sizeof(*a))
		return EINVAL;
	memset(attr, 0, attr_size < sizeof(*attr) ? attr_size : sizeof(*attr));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "%s", FFV_FW_VER);
	a->node_guid = d->node_guid;
	a->sys_image_guid = d->node_guid;
	a->max_mr_size = UINT64_MAX;
	a->page_size_cap = 4096;
	a->max_qp = FFV_MAX_QP;
	a->max_qp_wr = FFV_MAX_QP_WR;
	a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SRQ_RESIZE;
	a->max_sge = FFV_MAX_SGE;
	a->max_sge_rd = FFV_MAX_SGE;
	a->max_cq = FFV_MAX_CQ;
	a->max_cqe = FFV_MAX_CQE;
	a->max_mr = FFV_MAX_MR;
	a->max_pd = FFV_MAX_PD;
	a->max_qp_rd_atom = FFV_MAX_RD_ATOM;
	a->max_qp_init_rd_atom = FFV_MAX_RD_ATOM;
	a->max_res_rd_atom = FFV_MAX_RD_ATOM * FFV_MAX_QP;
	a->atomic_cap = IBV_ATOMIC_HCA;
	a->max_ah = FFV_MAX_AH;
	a->max_srq = FFV_MAX_SRQ;
	a->max_srq_wr = FFV_MAX_SRQ_WR;
	a->max_srq_sge = FFV_MAX_SGE;
	a->max_pkeys = 1;
	a->phys_port_cnt = 1;
	a->vendor_id = FFV_VENDOR_ID;
	a->vendor_part_id = 1;
	if (attr_size >= offsetof(struct ibv_device_attr_ex, phys_port_cnt_ex) + sizeof(uint32_t))
		attr->phys_port_cnt_ex = 1;
	return 0;
}

static int query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
	/*
	 * No memset: libibverbs zeroed attr at the size its own release knows,
	 * which can be smaller than these headers' (56.1 added active_speed_ex).
	 */
	if (port != 1)
		return EINVAL;
	attr->state = IBV_PORT_ACTIVE;
	attr->max_mtu = IBV_MTU_4096;
	attr->active_mtu = IBV_MTU_4096;
	attr->gid_tbl_len = 1;
	attr->max_msg_sz = FFV_MAX_MSG;
	attr->pkey_tbl_len = 1;
	attr->lid = ffv_dev(ctx->device)->lid;
	attr->sm_lid = 1;
	attr->max_vl_num = 1;
	attr->active_width = 2;		/* 4X */
	attr->active_speed = 32;	/* EDR */
	attr->phys_state = 5;		/* LinkUp */
	attr->link_layer = IBV_LINK_LAYER_INFINIBAND;
	return 0;
}

/* verbs_uninit_context closes async_fd too; the agent forgets the session's QPs and MRs. */
static void free_context(struct ibv_context *ctx)
{
	struct ffv_context *c = ffv_ctx(ctx);

	ffv_events_stop(c);
	close(c->async_w);
	close(c->async_r);
	ffv_grants_drop(c);
	ffv_agent_close(c);
	pthread_mutex_destroy(&c->mu);
	verbs_uninit_context(&c->vctx);
	free(c);
}

static const struct verbs_context_ops ops = {
	.query_device_ex = query_device_ex,
	.query_port = query_port,
	.free_context = free_context,
	.alloc_pd = ffv_alloc_pd,
	.dealloc_pd = ffv_dealloc_pd,
	.reg_mr = ffv_reg_mr,
	.dereg_mr = ffv_dereg_mr,
	.create_cq = ffv_create_cq,
	.resize_cq = ffv_resize_cq,
	.destroy_cq = ffv_destroy_cq,
	.poll_cq = ffv_poll_cq,
	.req_notify_cq = ffv_req_notify_cq,
	.create_ah = ffv_create_ah,
	.destroy_ah = ffv_destroy_ah,
	.create_qp = ffv_create_qp,
	.query_qp = ffv_query_qp,
	.modify_qp = ffv_modify_qp,
	.destroy_qp = ffv_destroy_qp,
	.post_send = ffv_post_send,
	.post_recv = ffv_post_recv,
	.create_srq = ffv_create_srq,
	.modify_srq = ffv_modify_srq,
	.query_srq = ffv_query_srq,
	.destroy_srq = ffv_destroy_srq,
	.post_srq_recv = ffv_post_srq_recv,
};

static struct verbs_context *alloc_context(struct ibv_device *dev, int cmd_fd, void *priv)
{
	struct ffv_context *c;

	(void)priv;
	c = verbs_init_and_alloc_context(dev, cmd_fd, c, vctx, RDMA_DRIVER_UNKNOWN);
	if (!c)
		return NULL;
	/*
	 * Asynchronous events come from us, not from a kernel: with async_fd
	 * set, libibverbs does not ask the (absent) kernel for one.
	 */
	if (ffv_async_open(c) < 0) {
		verbs_uninit_context(&c->vctx);
		free(c);
		return NULL;
	}
	c->agent = -1;
	c->vctx.context.num_comp_vectors = 1;
	pthread_mutex_init(&c->mu, NULL);
	verbs_set_ops(&c->vctx, &ops);
	return &c->vctx;
}

static const struct verbs_match_ent match_table[] = {
	VERBS_NAME_MATCH("ffv", NULL),
	{},
};

static const struct verbs_device_ops device_ops = {
	.name = "ffv",
	.match_min_abi_version = 1,
	.match_max_abi_version = 1,
	.match_table = match_table,
	.alloc_device = alloc_device,
	.uninit_device = uninit_device,
	.alloc_context = alloc_context,
};
PROVIDER_DRIVER(ffv, device_ops);
