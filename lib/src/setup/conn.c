/* SPDX-License-Identifier: MIT */
/*
 * A connection's last reference is gone: what it still holds in the
 * channels above the fd table (its shared memory, a link offer) goes
 * first, then the conn itself (fdtable.c, ff_conn_dispose).
 */
#include "core/core.h"
#include "links/links.h"
#include "setup/setup.h"
#include "shm/shm.h"

void ff_conn_free(struct ff_conn *c)
{
	if (c->shm)
		ff_shm_release(c);
	ff_offer_free(c->offer);
	ff_conn_dispose(c);
}
