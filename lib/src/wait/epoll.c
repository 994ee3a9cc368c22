/* SPDX-License-Identifier: MIT */
/*
 * epoll for the connections the kernel cannot judge alone: here the
 * design note, epoll_create/epoll_ctl and the replay after a decision;
 * the shm registrations in epoll_shm.c, the waits in epoll_wait.c.
 *
 * Design note.
 *
 * Pending connects. The kernel keys an epoll registration by (file, fd);
 * the swap replaces the file behind the fd, and closing the TCP file drops
 * its registrations. So epoll_ctl on a tracked, undecided fd (a socket
 * before or during a non-blocking connect) is remembered, and after the
 * decision:
 *  - swapped: each registration is added again on the new file, with the
 *    application's events and data (EPOLL_CTL_ADD re-checks readiness, so
 *    an edge-triggered waiter gets the edge it would have seen); onto the
 *    shared-memory channel, each becomes an shm registration (below);
 *  - overlay: each is modified back to the application's events.
 * While a connect is pending, its registrations also ask for EPOLLOUT, so
 * completion wakes epoll_wait even for a program that waits only for
 * EPOLLIN. epoll_wait then decides every pending connection it reports and
 * drops that event (the replay re-queues the real readiness). It knows
 * only the data word of an event, so it matches it against the
 * registrations of pending fds (a scan of the table up to the highest
 * tracked fd, done only while some connection is pending). Another thread
 * (the settler) may decide one while this one waits in the kernel: an
 * event the kernel gave for the old file then has the data of a
 * registration the swap brought onto shm during the call (ff_ep_adopts
 * counts them), and is taken out of the batch: the registration reports
 * it with its own bits, once (the kernel reports a registration once per
 * call; a loop that frees a connection at its first event would use it
 * freed at the second). Its bits go with that report, so a program that
 * gave another fd the same data loses none of that fd's.
 *
 * Shared-memory connections (docs/SHM.md). The fd is the bell socket, which
 * carries only doorbells; readiness lives in the rings.
 *  - epoll_ctl: the kernel gets the bell socket, registered by the shim as
 *    EPOLLIN|EPOLLET with the data TAG_HI:fd, which the program never sees
 *    (every event with TAG_HI in its upper half is the shim's). The
 *    program's registration (events, EPOLLET, EPOLLONESHOT, EPOLLRDHUP,
 *    EPOLLEXCLUSIVE, data) is kept here per (epoll fd, fd, connection),
 *    as the kernel keys by (epoll file, fd, file); the kernel's answer to
 *    the shim's own call (EEXIST, ENOENT, EBADF, EPERM, ELOOP, ...) is the
 *    program's. Its bell registration being edge-triggered, a bell nobody
 *    drains, or the bell socket's EOF, wakes a waiter once, not forever.
 *  - epoll_wait on a set with shm registrations reports the ready ones
 *    (from the rings) and the kernel's events for the other fds in one
 *    array: at most maxevents, each registration once per call. When both
 *    have more than fits they share the array, the odd half alternating,
 *    and the shm registrations are looked at from a rotating start, so
 *    neither side nor any connection starves.
 *    Level-triggered: reported while ready. Edge-triggered: reported when
 *    something new appeared since its last report, as the kernel's socket
 *    wake-ups would: bytes arrived, a condition (EPOLLRDHUP, EPOLLHUP,
 *    EPOLLERR, readable, writable) appeared, or room was made after the
 *    program wrote. EPOLLONESHOT: off after a report until EPOLL_CTL_MOD.
 *    A registration is looked at fully only if ff_shm_maybe (no lock, no
 *    system call) or its bell says it may have news, so a set of many idle
 *    connections costs a few loads each.
 *  - Nothing ready: spin (ff_shm_spin_until) on the rings, and on the epoll
 *    fd itself every FF_SPIN_KERNEL_EVERY rounds (poll() of an epoll fd
 *    consumes no event); then arm every registration that is on
 *    (ff_shm_arm: the peer will ring), sleep in the kernel's epoll_wait with
 *    the time left, disarm, and look again. An idle set costs one spin.
 *  - No wake-up is lost (docs/SHM.md, "Event loops"): what the peer changes
 *    in the rings comes with a bell once we armed (arm, fence, look again,
 *    then sleep: Dekker's pattern, shm_ring.c); what only the bell carries
 *    (the peer's close, whose EOF comes before its flags and may sit behind
 *    unread doorbells) is taken from the kernel's event itself (EPOLLHUP)
 *    and by reading the bell on every look its edge caused, ready or not:
 *    an edge-triggered bell reports it once.
 *  - A registration added or re-enabled while another thread sleeps in the
 *    set is not armed by that thread. So EPOLL_CTL_ADD, EPOLL_CTL_MOD and
 *    the replay then also register the bell for EPOLLOUT ("kick"): a bell
 *    socket is writable, so the kernel queues the event at once and wakes
 *    a sleeper, which looks again and arms it. Whoever receives the kick
 *    takes EPOLLOUT off again, or every doorbell the peer drains would wake
 *    this side. The same covers a thread that entered epoll_wait before the
 *    set had any shm registration (it is in libc's epoll_wait).
 *  - Lifetime: a registration holds a reference on the connection's shared
 *    memory. It goes with EPOLL_CTL_DEL, when the connection's last fd
 *    closes (as the kernel drops a registration when the file's last fd
 *    closes; noticed at the next look at the set), and when the connection
 *    moves down to a kernel socket: ff_epoll_replay, called by the move
 *    (shm_switch.c) once the fd no longer has FF_FD_SHM, registers it
 *    natively with the program's events and data (an EPOLLONESHOT one that
 *    had fired, disabled, as the kernel keeps it). epoll_create reusing
 *    the number of an epoll fd the program closed starts with nothing.
 *  - Copies: the kernel keys a set by its epoll file, and a program may
 *    register through one fd and wait on a copy (mio, under tokio, does:
 *    its Registry is an F_DUPFD_CLOEXEC copy of the fd its driver waits
 *    on). So the numbers made by dup/dup2/dup3/F_DUPFD* of an epoll fd
 *    lead to one set (ff_epset_dup); a number dup'ed over, or reused by
 *    epoll_create, leads to its new set only, and a set no number leads
 *    to any more drops its registrations.
 *
 * Locks: the table lock, then a set's mu. A set's mu guards the set's list
 * and the registrations' fields; it is never held while calling into shm.c
 * (which takes the table lock, and may move a connection down and so call
 * ff_epoll_replay), nor across a sleep, only around list work and the
 * shim's own epoll_ctl calls on bells.
 *
 * Known limits: lib/README.md, "Known limits" (shm, poll/epoll): an epoll
 * fd nested in another set or in poll, copied past libc's dup/fcntl (a raw
 * system call, SCM_RIGHTS) or shared across fork; the
 * cost of a look growing with the set; EPOLLEXCLUSIVE waking every set;
 * spurious edge-triggered EPOLLOUT; a registration whose fd was closed while
 * a dup keeps the connection reports nothing more ("orphan"). And for
 * pending connects: a registration in an epoll set whose fd the application
 * later closed and reused for another epoll set is replayed into the new
 * set.
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
	uint8_t fl = s && !ff_busy ? atomic_load(&s->flags) : 0;
	struct epoll_event kev;
	struct ff_conn *c;
	int ret, err;

	if (!(fl & FF_FD_TRACKED))
		return REAL(epoll_ctl)(epfd, op, fd, ev);
again:
	if (fl & FF_FD_SHM) {
		ret = ff_epset_ctl(epfd, op, fd, ev);
		if (ret != FF_SHM_MOVED) {
			if (ret < 0)
				errno = -ret;
			return ret < 0 ? -1 : 0;
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
