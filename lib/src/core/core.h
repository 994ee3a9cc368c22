/* SPDX-License-Identifier: MIT */
/*
 * Internal interface of the LD_PRELOAD shim, its lowest concern (core):
 * libc's real functions, log, clock and deadlines, addresses, the fd table,
 * carried socket options. docs/ARCHITECTURE.md has the overview; the design
 * note is at the top of negotiate.c; lib/README.md "Layers" says which
 * header is which concern's.
 *
 * Conventions: internal functions return 0 or -errno and never touch errno;
 * only the exported wrappers (the libc names) set errno. Everything here is
 * hidden by libfreeflow.map.
 *
 * Reaching libc (lib/README.md, "Rules for code inside the library"): inside
 * the library a libc name is the library's own wrapper. Only exported
 * functions use REAL(fn); all other code calls ff_real.fn. A wrapper calls
 * another by name only on purpose, saying so (aliases, exec family,
 * syscall()). ff_busy makes the wrappers pass straight to libc while the
 * library runs code that may reach one anyway; it does not replace ff_real.
 *
 * Start-up: wrappers enter through REAL(), ff_slot_enter() or ff_init()
 * (the entry helpers in proc.h: for exported functions only); lower code
 * never starts the library (ff_fd_slot() does not).
 */
#ifndef FREEFLOW_CORE_H
#define FREEFLOW_CORE_H

#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

/* ---- real.c: libc's own functions, resolved once ---- */

struct ff_real {
	int (*socket)(int, int, int);
	int (*connect)(int, const struct sockaddr *, socklen_t);
	int (*listen)(int, int);
	int (*accept)(int, struct sockaddr *, socklen_t *);
	int (*accept4)(int, struct sockaddr *, socklen_t *, int);
	int (*close)(int);
	int (*dup)(int);
	int (*dup2)(int, int);
	int (*dup3)(int, int, int);
	int (*fcntl)(int, int, ...);
	int (*fcntl64)(int, int, ...);
	int (*shutdown)(int, int);
	int (*ioctl)(int, unsigned long, ...);
	ssize_t (*read)(int, void *, size_t);
	ssize_t (*write)(int, const void *, size_t);
	ssize_t (*readv)(int, const struct iovec *, int);
	ssize_t (*writev)(int, const struct iovec *, int);
	ssize_t (*recv)(int, void *, size_t, int);
	ssize_t (*send)(int, const void *, size_t, int);
	ssize_t (*recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
	ssize_t (*sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
	ssize_t (*recvmsg)(int, struct msghdr *, int);
	ssize_t (*sendmsg)(int, const struct msghdr *, int);
	ssize_t (*sendfile)(int, int, off_t *, size_t);
	ssize_t (*read_chk)(int, void *, size_t, size_t);
	ssize_t (*recv_chk)(int, void *, size_t, size_t, int);
	ssize_t (*recvfrom_chk)(int, void *, size_t, size_t, int, struct sockaddr *, socklen_t *);
	int (*getsockname)(int, struct sockaddr *, socklen_t *);
	int (*getpeername)(int, struct sockaddr *, socklen_t *);
	int (*getsockopt)(int, int, int, void *, socklen_t *);
	int (*setsockopt)(int, int, int, const void *, socklen_t);
	int (*poll)(struct pollfd *, nfds_t, int);
	int (*select)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
	int (*epoll_create)(int);
	int (*epoll_create1)(int);
	int (*epoll_ctl)(int, int, int, struct epoll_event *);
	int (*epoll_wait)(int, struct epoll_event *, int, int);
	int (*epoll_pwait)(int, struct epoll_event *, int, int, const sigset_t *);
	int (*epoll_pwait2)(int, struct epoll_event *, int, const struct timespec *,
			    const sigset_t *);
	int (*ppoll)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
	int (*poll_chk)(struct pollfd *, nfds_t, int, size_t);
	int (*ppoll_chk)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *,
			 size_t);
	int (*pselect)(int, fd_set *, fd_set *, fd_set *, const struct timespec *,
		       const sigset_t *);
	int (*recvmmsg)(int, struct mmsghdr *, unsigned int, int, struct timespec *);
	int (*sendmmsg)(int, struct mmsghdr *, unsigned int, int);
	ssize_t (*splice)(int, loff_t *, int, loff_t *, size_t, unsigned int);
	int (*execve)(const char *, char *const[], char *const[]);
	int (*execvpe)(const char *, char *const[], char *const[]);
	int (*fexecve)(int, char *const[], char *const[]);
	int (*posix_spawn)(pid_t *, const char *, const posix_spawn_file_actions_t *,
			   const posix_spawnattr_t *, char *const[], char *const[]);
	int (*posix_spawnp)(pid_t *, const char *, const posix_spawn_file_actions_t *,
			    const posix_spawnattr_t *, char *const[], char *const[]);
	pid_t (*vfork)(void);
	long (*syscall)(long, ...);
	int (*close_range)(unsigned, unsigned, int);
	void (*closefrom)(int);
	FILE *(*fdopen)(int, const char *);
	int (*fclose)(FILE *);
	FILE *(*freopen)(const char *, const char *, FILE *);
	FILE *(*freopen64)(const char *, const char *, FILE *);
	ssize_t (*preadv2)(int, const struct iovec *, int, off_t, int);
	ssize_t (*pwritev2)(int, const struct iovec *, int, off_t, int);
	pid_t (*_Fork)(void);
	int (*system)(const char *);
	FILE *(*popen)(const char *, const char *);
	int (*open)(const char *, int, ...);
};

extern struct ff_real ff_real;

/* Fills ff_real, once (pthread_once); aborts if libc lacks a function the library needs. */
void ff_real_resolve(void);

/*
 * Start fn as a detached thread of the library's with every signal blocked
 * (the application's handlers must never run on it): 1 if it runs, 0 if
 * no thread was to be had.
 */
int ff_start_quiet_thread(void *(*fn)(void *));

/*
 * Set while the shim itself calls socket functions (the agent client): the
 * wrappers then go straight to libc, so the shim never tracks or negotiates
 * its own control sockets.
 */
extern _Thread_local int ff_busy;

/* ---- log.c ---- */

extern int ff_debug_on;
/* With FREEFLOW_DEBUG=1, one line on stderr saying why fd stays on the overlay. */
void ff_fallback(int fd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* With FREEFLOW_DEBUG=1, one line on stderr (for what is not about one fd). */
void ff_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- fdtable.c: what the shim knows about each fd ---- */

/* Where a connection that was on shm went (shm/switch.c), and may come back from (shm/resume.c). */
enum ff_moved {
	FF_MOVED_PAIR = 1,	/* moved down to a socket pair: its process forked, or passed it on */
	FF_MOVED_PARKED,	/* parked on TCP at its overlay tuple for a migration */
};

enum ff_state {
	FF_ST_SOCKET,		/* TCP socket, not connected yet */
	FF_ST_LISTEN,		/* listening */
	FF_ST_PENDING,		/* connect in progress or done, no decision yet */
	FF_ST_NEGOTIATING,	/* one thread is asking the agent */
	FF_ST_OVERLAY,		/* decided: plain TCP, the shim stays out of the way */
	FF_ST_SWAPPED,		/* decided: a kernel channel sits at the fd */
};

/* An epoll registration made before the decision, replayed after the swap. */
struct ff_epreg {
	struct ff_epreg *next;
	int epfd;
	struct epoll_event ev;	/* as the application gave it */
};

#define FF_MAX_OPTS	16

/* A socket option stored for a channel that lacks it (AF_UNIX has no TCP level). */
struct ff_opt {
	int level, name, value;
};

/* The two ends of a connection, as getsockname/getpeername (or a link's offer) gave them. */
struct ff_ends {
	struct sockaddr_storage local, remote;
	socklen_t local_len, remote_len;
};

/* One connection, shared by every fd that refers to it (dup, fork). */
struct ff_conn {
	int refs;			/* fds in this process's table */
	enum ff_state state;
	int family;			/* AF_INET or AF_INET6, as the application sees it */
	int kern_family;		/* the family of the socket really at the fd */
	int registered;			/* listener: the agent acknowledged LISTEN */
	pid_t reg_pid;			/* listener: the process that LISTEN registered */
	int answered;			/* the agent answered CONNECT/ACCEPT with a PATH */
	int pending_fd;			/* PENDING/NEGOTIATING: the fd, for epoll matching */
	struct ff_ends ends;
	struct ff_epreg *epregs;
	unsigned opts_set;		/* the carried options the application set: ff_opt_carried's bits */
	int nopts;
	struct ff_opt opts[FF_MAX_OPTS];
	struct ff_shm *shm;		/* SWAPPED onto the shared-memory channel (shm.h) */
	struct ff_offer *offer;		/* connecting over a link: the channel offered (link.c) */
	uint64_t ledger;		/* linked: its entry in the ledger (ledger.c); 0 none */
	int moved;			/* off shm on a kernel channel that may come back: enum ff_moved */
	/* moved: back to shm (shm/resume.c). Under the table lock. */
	int held;			/* 1: its writers wait; 2: every call on it waits */
	int readers, writers;		/* threads inside a data call on it, by direction */
	int polling;			/* threads in poll/select over it (they never wait) */
	int raw_armed;			/* on shm since, and armed for pollers from before: the last disarms */
	int shut;			/* the program's shutdowns: SHUT_RD + 1 bits */
	int passed;			/* where the library cannot follow it: it stays a pair */
	int disposed;			/* freed while threads were inside: the last one out frees it */
	int syn_marked;			/* connecting: its SYN is marked until decided (synmark.c) */
	int app_tos, app_tclass;	/* meanwhile, the application's IP_TOS and IPV6_TCLASS */
	int tos_touched;		/* the application set IP_TOS, IPV6_TCLASS or SO_PRIORITY */
	int peer_nolib;			/* accepted: its SYN carried no mark, the peer has no library */
	int app_saves_syn;		/* listener: the application's TCP_SAVE_SYN (the shim sets its own) */
	int fastopen;			/* TCP_FASTOPEN_CONNECT set: not negotiated (synmark.c) */
	int withdrawn;			/* listener: accepts by a route the shim does not see (listeners.c) */
};

/* Bits of ff_slot.flags. */
#define FF_FD_TRACKED	1u	/* conn is set */
#define FF_FD_PENDING	2u	/* data calls must wait for the decision */
#define FF_FD_CONTROL	4u	/* a control connection to the agent */
#define FF_FD_SWAPPED	8u	/* conn is SWAPPED: a kernel channel sits at the fd */
#define FF_FD_SHM	16u	/* conn->shm is set: the data path goes through shm/io.c */
#define FF_FD_RING	32u	/* an io_uring whose submissions the shim follows (routes.c) */
#define FF_FD_UVERBS	64u	/* the verbs device's command file (calls/uverbs.c) */
#define FF_FD_RDMACM	128u	/* an rdma_cm event channel (calls/rdmacm.c) */
/* conn moved off shm (enum ff_moved): calls on it are counted, and wait while it is held (shm/resume.c) */
#define FF_FD_MOVED	256u
/* Some fd was ever FF_FD_MOVED: until then poll and select look at no slot for it. */
extern _Atomic int ff_moved_seen;

struct ff_slot {
	_Atomic uint16_t flags;
	struct ff_conn *conn;
};

/* fd's slot, or NULL if fd is outside the table; never starts the library (see the end). */
struct ff_slot *ff_fd_slot(int fd);
void ff_table_lock(void);
void ff_table_unlock(void);
/* Wait (table lock held) until some decision was made. */
void ff_table_wait(void);
/* The same, until CLOCK_MONOTONIC ms end at most. */
void ff_table_wait_until(int64_t end);
/* Table lock held: s's conn once no decision is in progress for it (waits for one), or NULL. */
struct ff_conn *ff_conn_settled(struct ff_slot *s);
void ff_table_broadcast(void);
/* Highest fd ever tracked, for scans. */
int ff_table_hiwater(void);
/* Number of conns in PENDING/NEGOTIATING: poll/epoll_wait check it first. */
extern _Atomic int ff_pending_count;

/*
 * Takes the table lock: the slot of fd, if no conn has it, gets flags:
 * FF_FD_CONTROL (the library's connection), FF_FD_RING, or 0 to unmark.
 */
void ff_fd_mark(int fd, uint16_t flags);
/* Takes the table lock: unmarks and closes fd if it is still marked FF_FD_CONTROL; else -EBADF. */
int ff_fd_close_control(int fd);

/* Under the table lock. */
struct ff_conn *ff_conn_new(int family);
void ff_fd_attach(int fd, struct ff_conn *c);
/* fd's slot flags derived again from its conn, which changed what it is (moved down, parked, back on shm). */
void ff_fd_reflag(int fd);
/* Clears the slot; returns its conn (the caller owns that reference) or NULL. */
struct ff_conn *ff_fd_detach(int fd);
void ff_conn_set_state(struct ff_conn *c, enum ff_state st);
/* Drops one reference; returns 1 when it was the last (then call ff_conn_free). */
int ff_conn_unref(struct ff_conn *c);
/* c's own memory: the pending count, its epoll records, c (ff_conn_free frees the rest first). */
void ff_conn_dispose(struct ff_conn *c);
void ff_conn_forget_epregs(struct ff_conn *c);

/* ---- addr.c: addresses and sockets ---- */

/* An endpoint attribute (FF_EP4_LEN/FF_EP6_LEN bytes) from a sockaddr. */
int ff_endpoint(const struct sockaddr_storage *sa, uint8_t out[18]);
/* As ff_endpoint, but a v4-mapped IPv6 address stays 18 bytes: the socket is IPv6 (a ledger's local end). */
int ff_endpoint_as_is(const struct sockaddr_storage *sa, uint8_t out[18]);
/* Whether connections from or to sa are left alone (loopback; negotiate.c's design note). */
int ff_skip_loopback(const struct sockaddr_storage *sa);
/* Whether fd is a socket of type (SOCK_STREAM, ...), and AF_UNIX if must_be_unix. */
int ff_is_socket(int fd, int type, int must_be_unix);

/* ---- opts.c: the socket options carried across a swap, and stored ones ---- */

/* Table lock held, before the dup3 of the swap: oldfd's carried options onto newfd (or c). */
void ff_sockopt_carry(int oldfd, int newfd, struct ff_conn *c);
/* The TCP-level options c's socket pair or shm channel kept for it, set on newfd, a TCP socket (parking). */
void ff_sockopt_to_tcp(const struct ff_conn *c, int newfd);
/* Table lock held: c was accepted on listener l; TCP copies l's buffer sizes. */
void ff_sockopt_inherit(struct ff_conn *c, const struct ff_conn *l);
/* Table lock held: whether the application set option (level, name) on c (opts.c keeps those). */
int ff_sockopt_app_set(struct ff_conn *c, int level, int name);
/* Option (level, name)'s bit in opts_set if a swap carries it over, else 0. */
unsigned ff_opt_carried(int level, int name);
/* Linux's value of an int option on a fresh connection (what an emulated one reads unset). */
int ff_opt_default(int level, int name);
/* Table lock held: c's stored option (level, name), added with its default if add; or NULL. */
struct ff_opt *ff_opt_find(struct ff_conn *c, int level, int name, int add);

/* ---- deadline.c ---- */
/*
 * The library's clock (CLOCK_MONOTONIC) and deadlines, so that a wait that
 * wakes for nothing and sleeps again keeps its bound instead of starting it
 * over, and the one bounded poll of a single fd.
 */

/* Initialise *cv to time its waits on CLOCK_MONOTONIC (the clock of ff_now_*). */
void ff_cond_init_monotonic(pthread_cond_t *cv);

static inline int64_t ff_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline int64_t ff_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Wait for ev on fd until end_ms (ff_now_ms) through libc's poll: 1 ready
 * (or HUP/ERR: the next call on fd reports it), 0 the time is up, or
 * -errno; EINTR is retried.
 */
int ff_poll_until(int fd, short ev, int64_t end_ms);

/*
 * Whether a blocking call a signal interrupted would go on by itself: every
 * handler that could have interrupted this thread asked for SA_RESTART
 * (poll() does not say which signal it was).
 */
int ff_signal_restarts(void);

/* A deadline in ns: CLOCK_MONOTONIC nanoseconds, or FF_FOREVER. */
#define FF_FOREVER		INT64_MAX

/* ts NULL: forever. The caller has checked ts is valid (ff_ts_valid). */
static inline int64_t ff_deadline_ts(const struct timespec *ts)
{
	if (!ts)
		return FF_FOREVER;
	if (ts->tv_sec > INT64_MAX / 2 / 1000000000)
		return FF_FOREVER;	/* centuries: as good as forever */
	return ff_now_ns() + (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

/* A poll()/epoll_wait() timeout: negative waits forever. */
static inline int64_t ff_deadline_ms(int ms)
{
	return ms < 0 ? FF_FOREVER : ff_now_ns() + (int64_t)ms * 1000000;
}

/* What the kernel itself would refuse with EINVAL: let it say so. */
static inline int ff_ts_valid(const struct timespec *ts)
{
	return !ts || (ts->tv_sec >= 0 && ts->tv_nsec >= 0 && ts->tv_nsec < 1000000000);
}

static inline int64_t ff_left_ns(int64_t end)
{
	int64_t now;

	if (end == FF_FOREVER)
		return FF_FOREVER;
	now = ff_now_ns();
	return end > now ? end - now : 0;
}

/* The time left as a timespec (NULL: forever). */
static inline const struct timespec *ff_left_ts(int64_t end, struct timespec *ts)
{
	int64_t left = ff_left_ns(end);

	if (left == FF_FOREVER)
		return NULL;
	ts->tv_sec = left / 1000000000;
	ts->tv_nsec = left % 1000000000;
	return ts;
}

/* The time left in ms, rounded up so that a wait never ends before the deadline; -1: forever. */
static inline int ff_left_ms(int64_t end)
{
	int64_t left = ff_left_ns(end);

	if (left == FF_FOREVER)
		return -1;
	left = (left + 999999) / 1000000;
	return left > INT_MAX ? INT_MAX : (int)left;
}

#endif
