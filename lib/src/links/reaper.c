/* SPDX-License-Identifier: MIT */
/*
 * The links' reapers (links.h): one thread per table that closes what
 * ends when it ends (links, their stock, pending offers), also in a process
 * that never calls the library again. It leaves when nothing is left and
 * starts again with the next link.
 */
#include <time.h>

#include "core/core.h"
#include "links/links.h"

void *ff_reaper_run(struct ff_reaper *r)
{
	struct timespec ts;
	int64_t next;

	for (;;) {
		if (r->outer)
			pthread_mutex_lock(r->outer);
		pthread_mutex_lock(r->mu);
		r->next = next = r->expire();
		if (r->outer)
			pthread_mutex_unlock(r->outer);
		if (!next)
			break;
		ts.tv_sec = next / 1000;
		ts.tv_nsec = next % 1000 * 1000000;
		pthread_cond_timedwait(&r->cv, r->mu, &ts);
		pthread_mutex_unlock(r->mu);
	}
	r->running = 0;
	pthread_mutex_unlock(r->mu);
	return NULL;
}

void ff_reaper_kick(struct ff_reaper *r, int64_t end)
{
	if (r->running) {
		/* Most new things end after what it waits for: no wake-up per connection. */
		if (end < r->next)
			pthread_cond_signal(&r->cv);
		return;
	}
	if (!r->ready) {
		ff_cond_init_monotonic(&r->cv);
		r->ready = 1;
	}
	/* Without it (no thread to be had), links still close when next used, as ever. */
	r->running = ff_start_quiet_thread(r->thread);
}

void ff_reaper_forked(struct ff_reaper *r)
{
	r->running = 0;		/* threads do not fork; nor do the waits on cv */
	if (r->ready)
		ff_cond_init_monotonic(&r->cv);
}
