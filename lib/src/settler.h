/* SPDX-License-Identifier: MIT */
/*
 * The settler: a library thread that decides a non-blocking connect the
 * program has not looked at a few ms after it completed (settler.c).
 */
#ifndef FREEFLOW_SETTLER_H
#define FREEFLOW_SETTLER_H

struct ff_conn;

enum ff_settle_kind {
	FF_SETTLE_PLAIN,		/* asks the agent */
	FF_SETTLE_OFFERED,		/* offered over a link; bell: the offer's bell socket */
	FF_SETTLE_OFFERED_ACROSS,	/* offered over a cross-host link */
};

/*
 * fd's connect is in progress (its conn PENDING): decide it once it
 * completes, if the program has not by then (settler.c says when).
 */
void ff_settler_watch(int fd, struct ff_conn *c, enum ff_settle_kind kind, int bell);
/* fork: what is pending now is the program's to decide, in either process; waits for decisions under way. */
void ff_settler_atfork_prepare(void);
/* After fork, in the parent: decisions may start again. */
void ff_settler_atfork_parent(void);
/* In a fork child: the thread is the parent's. */
void ff_settler_atfork_child(void);

#endif
