/* SPDX-License-Identifier: MIT */
/*
 * epoll for the connections the kernel cannot judge alone: here the
 * design note, epoll_create/epoll_ctl and the replay after a decision;
 * the shm registrations in shm/epoll.c, the waits in epoll_wait.c.
 *
 * Design note (at length: docs/BROKERING.md, "Pending connects in epoll";
 * docs/SHM.md, "Epoll on shared memory" and "Event loops").
 * - Pending connects: the swap replaces the file behind the fd, which
 *   drops the kernel's registrations, so epoll_ctl on an undecided fd is
 *   remembered and replayed after the decision (onto shm, as shm
 *   registrations). Pending, they also ask for EPOLLOUT; epoll_wait decides
 *   each pending connection it reports and drops that event.
 * - Shared memory: the kernel gets the bell socket, registered as
 *   EPOLLIN|EPOLLET with the data TAG_HI:fd (never the program's); the
 *   program's registration is kept here per (epoll fd, fd, connection), and
 *   readiness comes from the rings. epoll_wait arms every registration that
 *   is on, looks again, then sleeps: no wake-up is lost.
 * - A registration added or re-enabled while another thread sleeps in the
 *   set gets a kick (the bell registered for EPOLLOUT too), which whoever
 *   receives it takes off again.
 * - A registration holds a reference on the connection's shared memory
 *   until EPOLL_CTL_DEL, the connection's last close, or its move down
 *   (ff_epoll_replay registers it natively). Copies of an epoll fd made by
 *   dup/dup2/dup3/F_DUPFD* lead to one set (ff_epset_dup).
 *
 * Locks: the table lock, then a set's mu. A set's mu guards the set's list
 * and the registrations' fields; it is never held while calling into shm/io.c
 * (which takes the table lock, and may move a connection down and so call
 * ff_epoll_replay), nor across a sleep, only around list work and the
 * shim's own epoll_ctl calls on bells.
 *
 * Known limits: lib/README.md, "Known limits" (shm, poll/epoll); for
 * pending connects, the doc section above.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "proc/proc.h"
#include "shm/shm.h"
#include "wait/wait.h"

/* ---- pending connects ---- */

static uint32_t armed(const struct ff_conn *c, uint32_t events)
{
	return c->state == FF_ST_PENDING ? events | EPOLLOUT : events;
}

/* Table lock held. */
static void record(struct ff_conn *c, int epfd, int op, const struct epoll_event *ev)
{
	struct ff_epreg **p = &c->epregs, *r;

	while (*p && (*p)->epfd != epfd)
		p = &(*p)->next;
	if (op == EPOLL_CTL_DEL) {
		if ((r = *p)) {
			*p = r->next;
			free(r);
		}
		return;
	}
	if (!*p) {
		if (!(r = calloc(1, sizeof(*r))))
			return;
		r->epfd = epfd;
		*p = r;
	}
	(*p)->ev = *ev;
}

/* Table lock held: the connection just became pending. */
void ff_epoll_arm_pending(int fd, struct ff_conn *c)
{
	for (struct ff_epreg *r = c->epregs; r; r = r->next) {
		struct epoll_event ev = r->ev;

		ev.events = armed(c, ev.events);
		ff_real.epoll_ctl(r->epfd, EPOLL_CTL_MOD, fd, &ev);
	}
}

/* ---- the wrappers (epoll_wait.c has the waits; shm/epoll.c the replay) ---- */

FF_EXPORT int epoll_create(int size)
{
	int fd = REAL(epoll_create)(size), err = errno;

	ff_epset_new(fd);
	errno = err;
	return fd;
}

FF_EXPORT int epoll_create1(int flags)
{
	int fd = REAL(epoll_create1)(flags), err = errno;

	ff_epset_new(fd);
	errno = err;
	return fd;
}

FF_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	struct ff_slot *s = ff_slot_enter(fd);
	uint16_t fl = s && !ff_busy ? atomic_load(&s->flags) : 0;
	struct epoll_event kev;
	struct ff_conn *c;
	FF_ENTERED;
	int ret, err;

	if (!(fl & FF_FD_TRACKED))
		return REAL(epoll_ctl)(epfd, op, fd, ev);
	/* A socket pair going back to shm moves its registrations itself (shm/resume.c). */
	if ((fl & FF_FD_MOVED) && ff_moved_enter(fd, 0, &ff_entered_))
		fl = atomic_load(&s->flags);
again:
	if (fl & FF_FD_SHM) {
		ret = ff_epset_ctl(epfd, op, fd, ev);
		if (ret != FF_SHM_MOVED) {
			if (ret < 0)
				errno = -ret;
			return ret < 0 ? -1 : 0;
		}
		/* Moved down meanwhile: a socket pair now, this call counted on it (or on shm again). */
		if (!ff_entered_.c[0] && (atomic_load(&s->flags) & FF_FD_MOVED) && ff_moved_enter(fd, 0, &ff_entered_)) {
			fl = FF_FD_SHM;
			goto again;
		}
	}
	ff_table_lock();
	c = ff_conn_settled(s);
	/*
	 * Another thread (the settler, settler.c) put it on shm meanwhile: a
	 * kernel registration of its bell would never report the rings.
	 */
	if (!(fl & FF_FD_SHM) && (atomic_load(&s->flags) & FF_FD_SHM)) {
		fl = FF_FD_SHM;
		ff_table_unlock();
		goto again;
	}
	if (!c || (c->state != FF_ST_SOCKET && c->state != FF_ST_PENDING) ||
	    (op != EPOLL_CTL_DEL && !ev)) {
		ff_table_unlock();
		return ff_real.epoll_ctl(epfd, op, fd, ev);
	}
	if (ev) {
		kev = *ev;
		kev.events = armed(c, kev.events);
	}
	ret = ff_real.epoll_ctl(epfd, op, fd, ev ? &kev : NULL);
	err = errno;
	if (ret == 0)
		record(c, epfd, op, ev);
	ff_table_unlock();
	errno = err;
	return ret;
}
