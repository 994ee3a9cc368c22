/* SPDX-License-Identifier: MIT */
/*
 * The settler: a library thread that decides each non-blocking connect as
 * soon as it completes, whenever the application looks at it.
 */
#ifndef FREEFLOW_SETTLER_H
#define FREEFLOW_SETTLER_H

/* fd's connect is in progress (its conn PENDING): decide it once it completes. */
void ff_settler_watch(int fd);
/* In a fork child: the thread is the parent's. */
void ff_settler_atfork_child(void);

#endif
