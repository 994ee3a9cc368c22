/* SPDX-License-Identifier: MIT */
/*
 * verbs: the virtual RDMA device's provider (libffv-rdmav34.so), which the
 * stock libibverbs loads from RDMAV_DRIVERS and matches to the device
 * `freeflow run` describes in the container's sysfs tree (SYSFS_PATH).
 * docs/VERBS.md says how it is found, what it answers, and why.
 *
 * Built against rdma-core's provider headers (scripts/install-deps.sh
 * fetches Debian's source package and generates them); private ABI 34,
 * bookworm's libibverbs 44 and every release up to 56.
 */
#ifndef FF_VERBS_H
#define FF_VERBS_H

#include <stdint.h>

#include <infiniband/driver.h>

/* The device as the container's sysfs tree gives it (device.c). */
struct ffv_device {
	struct verbs_device vdev;
	uint16_t lid;
	uint64_t node_guid;		/* network order, as ibv_device_attr has it */
};

struct ffv_context {
	struct verbs_context vctx;
};

static inline struct ffv_device *ffv_dev(struct ibv_device *d)
{
	return container_of(d, struct ffv_device, vdev.device);
}

/* libibverbs hands out &vctx.context, the last member of a verbs_context. */
static inline struct ffv_context *ffv_ctx(struct ibv_context *ctx)
{
	return container_of(ctx, struct ffv_context, vctx.context);
}

#endif
