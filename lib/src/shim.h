/* SPDX-License-Identifier: MIT */
/*
 * Internal interface of the LD_PRELOAD shim (docs/ARCHITECTURE.md has the
 * overview; the design note is at the top of negotiate.c).
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
 * (the entry helpers, at the end of this file: for exported functions
 * only); lower code never starts the library (ff_fd_slot() does not).
 */
#ifndef FREEFLOW_SHIM_H
#define FREEFLOW_SHIM_H

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

/* ---- real.c: libc's own functions, resolved once; start.c: start-up ---- */

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
};

extern struct ff_real ff_real;

/* Fills ff_real, once (pthread_once); aborts if libc lacks a function the library needs. */
void ff_real_resolve(void);

/* Resolves ff_real and reads the environment, once; cheap after that. */
void ff_init(void);
/*
 * Whether ff_init has run to its end. Entry points that an allocator takes
 * during its own start-up (jemalloc reads /proc through syscall()) must not
 * start the library, which allocates: before it started, no fd is tracked,
 * so the kernel is the right answer.
 */
int ff_ready(void);
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
	int opts_set;			/* the application set a carried option (opts.c) */
	int nopts;
	struct ff_opt opts[FF_MAX_OPTS];
	struct ff_shm *shm;		/* SWAPPED onto the shared-memory channel (shm.h) */
	struct ff_offer *offer;		/* connecting over a link: the channel offered (link.c) */
	uint64_t ledger;		/* linked: its entry in the ledger (ledger.c); 0 none */
	int moved;			/* moved down from shm to a socket pair (shm_switch.c) */
	int syn_marked;			/* connecting: its SYN is marked until decided (synmark.h) */
	int app_tos, app_tclass;	/* meanwhile, the application's IP_TOS and IPV6_TCLASS */
	int tos_touched;		/* the application set IP_TOS, IPV6_TCLASS or SO_PRIORITY */
	int peer_nolib;			/* accepted: its SYN carried no mark, the peer has no library */
	int app_saves_syn;		/* listener: the application's TCP_SAVE_SYN (the shim sets its own) */
	int fastopen;			/* TCP_FASTOPEN_CONNECT set: not negotiated (synmark.h) */
	int withdrawn;			/* listener: accepts by a route the shim does not see (listeners.c) */
};

/* Bits of ff_slot.flags. */
#define FF_FD_TRACKED	1u	/* conn is set */
#define FF_FD_PENDING	2u	/* data calls must wait for the decision */
#define FF_FD_CONTROL	4u	/* a control connection to the agent */
#define FF_FD_SWAPPED	8u	/* conn is SWAPPED: a kernel channel sits at the fd */
#define FF_FD_SHM	16u	/* conn->shm is set: the data path goes through shm.c */
#define FF_FD_RING	32u	/* an io_uring whose submissions the shim follows (routes.c) */

struct ff_slot {
	_Atomic uint8_t flags;
	struct ff_conn *conn;
};

/* fd's slot, or NULL if fd is outside the table; never starts the library (see the end). */
struct ff_slot *ff_fd_slot(int fd);
void ff_table_lock(void);
void ff_table_unlock(void);
/* Wait (table lock held) until some decision was made. */
void ff_table_wait(void);
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
void ff_fd_mark(int fd, uint8_t flags);
/* Takes the table lock: unmarks and closes fd if it is still marked FF_FD_CONTROL; else -EBADF. */
int ff_fd_close_control(int fd);

/* Under the table lock. */
struct ff_conn *ff_conn_new(int family);
void ff_fd_attach(int fd, struct ff_conn *c);
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
/* Whether connections from or to sa are left alone (loopback; negotiate.c's design note). */
int ff_skip_loopback(const struct sockaddr_storage *sa);
/* Whether fd is a socket of type (SOCK_STREAM, ...), and AF_UNIX if must_be_unix. */
int ff_is_socket(int fd, int type, int must_be_unix);

/* ---- opts.c: the socket options carried across a swap, and stored ones ---- */

/* Table lock held, before the dup3 of the swap: oldfd's carried options onto newfd (or c). */
void ff_sockopt_carry(int oldfd, int newfd, struct ff_conn *c);
/* Table lock held: c was accepted on listener l; TCP copies l's buffer sizes. */
void ff_sockopt_inherit(struct ff_conn *c, const struct ff_conn *l);
/* Table lock held: whether the application set option (level, name) on c (opts.c keeps those). */
int ff_sockopt_app_set(struct ff_conn *c, int level, int name);
/* Whether a swap carries option (level, name) over. */
int ff_opt_carried(int level, int name);
/* Linux's value of an int option on a fresh connection (what an emulated one reads unset). */
int ff_opt_default(int level, int name);
/* Table lock held: c's stored option (level, name), added with its default if add; or NULL. */
struct ff_opt *ff_opt_find(struct ff_conn *c, int level, int name, int add);

/* ---- conn.c ---- */

/* Table lock held: c's last reference is gone; its shared memory, offer and c itself go. */
void ff_conn_free(struct ff_conn *c);

/* ---- socket_calls.c: what every close route shares ---- */

/*
 * Table lock held: fd is about to be closed (or replaced); its slot is
 * cleared. Returns its conn if that was its last fd, for ff_conn_closed.
 */
struct ff_conn *ff_fd_forget(int fd);
/* No lock held: the last fd of c is gone (NULL: nothing); tells the agent, frees c. */
void ff_conn_closed(struct ff_conn *c);
/*
 * Something the shim cannot follow will use fd's socket as it is: a
 * connection without its decision (or not connected yet) stays on the
 * overlay, as a dup before the decision makes it. why: for FREEFLOW_DEBUG.
 */
void ff_fd_keep_overlay(int fd, const char *why);

/* ---- routes.c: syscall(), close_range, stdio, io_uring ---- */

/*
 * fd is about to be used by a route the shim cannot serve on shm (the
 * kernel or libc's internal I/O acts on it): decided or kept on the
 * overlay, and moved down if on shm.
 */
void ff_fd_to_kernel(int fd, const char *why);
/* Move every shm connection down, and every later one (ff_shm_avoided). */
void ff_shm_avoid(const char *why);
/* Ring fd (FF_FD_RING) is being closed: the shim's mapping of it goes. */
void ff_ring_closed(int fd);

/* ---- control.c: this thread's connection to the agent ---- */

struct ff_agent;
struct ff_reply;
/*
 * This thread's session (connected, HELLO done, listeners re-sent if the
 * agent may have lost them): 0 if it was open already, 1 if just opened,
 * or a -errno (-FF_ELIMIT: the agent refused it, LIMIT).
 */
int ff_control_get(struct ff_agent **out);
/* After a failed request (err < 0): forget the session if ff_agent closed it. */
void ff_control_broken(int err);
/*
 * Whether the agent is there, on this thread's session (opened, or opened
 * anew if the agent went away meanwhile, which re-sends what it lost).
 */
int ff_control_alive(void);
/*
 * A session of the process's own beside the threads' (connected, HELLO
 * done, marked as the library's: a fork child closes it), for requests
 * answered later; 0 or -errno. Valid while pid (its opener) is this
 * process and the application has not taken its fd number. ff_agent_close
 * unmarks and closes it (a->close_fd is ff_fd_close_control), as it does a
 * thread's session.
 */
int ff_control_open_own(struct ff_agent *a);
int ff_control_own_valid(struct ff_agent *a, pid_t pid);
void ff_control_atfork_child(void);
/* What the sessions tell the code above them (start.c passes listeners.c's). */
struct ff_session_hooks {
	/* A session broke or the agent was not reached: the agent may have lost what it was told. */
	void (*lost)(void);
	/* A thread's session was just opened (HELLO done): re-send what was lost; 0 or -errno. */
	int (*opened)(struct ff_agent *a);
};
/* At start-up, before any session: reads FREEFLOW_AGENT_SOCKET, keeps a copy of *h. */
void ff_control_init(const struct ff_session_hooks *h);

/* ---- agent_requests.c: what the library asks the agent ---- */

/*
 * CONNECT/ACCEPT for the connection local -> remote on this thread's
 * session: 0 with the reply in r (PATH or ERROR; the caller closes its
 * fds, ff_reply_close_fds), or -errno (-EADDRNOTAVAIL: loopback, not
 * asked; -FF_ELIMIT: the agent refused the session).
 */
int ff_ask(uint8_t msg, const struct sockaddr_storage *local,
	   const struct sockaddr_storage *remote, struct ff_reply *r);
/*
 * Best-effort LISTEN / UNLISTEN / CLOSED; the result only says if the agent
 * took it (for CLOSED, a notification never answered: that it was sent).
 */
int ff_announce(uint8_t msg, const struct sockaddr_storage *local,
		const struct sockaddr_storage *remote);
/* The same on a given session (the one being opened). */
int ff_announce_on(struct ff_agent *a, uint8_t msg, const struct sockaddr_storage *local,
		   const struct sockaddr_storage *remote);

/* LEDGER on this thread's session, or on session a: 0 or -errno. */
int ff_send_ledger(int memfd);
int ff_send_ledger_on(struct ff_agent *a, int memfd);
/*
 * LINK_FILL on session a, answered later (ff_agent_await): the request's
 * seq, or -errno. Then the stock its PATH reply r carries into fds (cap of
 * them): their number, -ENOENT if the agent no longer knows the link, or
 * another -errno.
 */
int64_t ff_link_fill_send(struct ff_agent *a, uint64_t link, uint32_t count);
int ff_link_fill_read(struct ff_reply *r, int *fds, int cap);

/* ---- negotiate.c ---- */

/* Negotiate fd (connected, its conn in NEGOTIATING) with msg CONNECT/ACCEPT. */
void ff_negotiate(int fd, struct ff_conn *c, uint8_t msg);
/*
 * A data call on fd is about to run. Returns 0 to go on (decision made or
 * fd untracked), or -errno the call must fail with (e.g. -EAGAIN while a
 * non-blocking connect is still in progress).
 */
int ff_settle_slow(int fd, int nonblock);

/* What a fast path hands over: the channel, and for shm its mapped memory. */
struct ff_handover {
	int chan;		/* the socket to put at the fd (shm: the bell socket) */
	struct ff_shm *shm;	/* NULL unless shm */
};

/* ---- link.c: same-host connections set up without the agent ---- */

/* Keep link fd, which came with the shm PATH of local -> remote (our role: acceptor or not). */
void ff_link_add(int fd, int acceptor, const struct sockaddr_storage *local,
		 const struct sockaddr_storage *remote, uint32_t ttl_ms, uint32_t ring);
/*
 * connect(fd, sa) is about to send its SYN: if a link leads to sa, bind fd
 * if needed and offer the connection over it. The offer, or NULL (then
 * the connection asks the agent as usual). No lock held.
 */
struct ff_offer *ff_link_offer(int fd, const struct sockaddr *sa, socklen_t len);
/* The connection was not made (or is dropped): withdraw the offer and free it (NULL: nothing). */
void ff_offer_free(struct ff_offer *o);
/* The acceptor's address connect() was given. */
void ff_offer_peer(const struct ff_offer *o, struct sockaddr_storage *sa, socklen_t *len);
/*
 * The TCP connection ended before the decision: 1 if the acceptor took the
 * offer anyway (it resets the overlay socket as it swaps), else 0 and the
 * offer is withdrawn.
 */
int ff_offer_taken(struct ff_offer *o);
/* A fork child's copy of its parent's offer: free it, deciding nothing. */
void ff_offer_forget(struct ff_offer *o);
/*
 * The connection with c->offer is established: wait (at most 5 ms) for
 * the acceptor. 1: taken, h filled; 0: not taken, ask the agent. c->offer
 * is consumed.
 */
int ff_offer_settle(struct ff_conn *c, struct ff_handover *h);
/* An accepted connection: its offer from a link taken (1, h filled), or none: ask the agent (0). */
int ff_link_take(const struct sockaddr_storage *local, const struct sockaddr_storage *remote,
		 struct ff_handover *h);
/* The listener at local is closed: its links and the offers they brought go. */
void ff_links_unlisten(const struct sockaddr_storage *local);
/* The process keeps off shm (routes.c): every same-host link and pending offer goes. */
void ff_links_drop_all(void);
void ff_links_atfork_prepare(void);
void ff_links_atfork_parent(void);
void ff_links_atfork_child(void);

/* ---- ledger.c: this process's live connections, as the agent reads them ---- */

/*
 * Make the ledger and hand it to the agent (once per process): 0 when the
 * agent has it, else -errno (then no link may be used).
 */
int ff_ledger_ready(void);
/* Whether the agent has the ledger already (ff_ledger_ready without sending it). */
int ff_ledger_held(void);
/* Reserve an entry for a connection about to be decided; 0: none free (or no ledger). */
uint64_t ff_ledger_reserve(void);
/* A connection as its ledger entry lists it. */
struct ff_ledger_row {
	int fd;
	const struct ff_ends *ends;
	uint8_t path;		/* a PATH_KIND */
	uint32_t bytes;		/* shm memory held, else 0 */
	const char *reason;	/* why overlay, or why unix is not shm; NULL: none */
	/*
	 * Decided without the agent, over a link or (overlay) for a peer
	 * without the library, and counted in the header for it; else
	 * answered by the agent, which counts it itself.
	 */
	int alone;
};
/* Fill reserved entry e with row and list it. */
void ff_ledger_publish(uint64_t e, const struct ff_ledger_row *row);
/*
 * Set in a fork child and in an exec'd image that adopted connections:
 * they hold connections their own ledger does not list yet (their
 * parent's, or the old image's, entries do).
 */
extern _Atomic int ff_ledger_inherit_pending;
/* No lock held: list them, once (it may open an agent session and make the ledger). */
void ff_ledger_list_inherited(void);
/* At a data call on a swapped fd: a child lists what it holds when it first uses it. */
static inline void ff_ledger_inherited(void)
{
	if (atomic_load_explicit(&ff_ledger_inherit_pending, memory_order_relaxed))
		ff_ledger_list_inherited();
}
/* The connection of entry e moved down to the socket pair now at fd. */
void ff_ledger_moved(uint64_t e, int fd);
/* Give back a reserved entry that was not published (0: nothing). */
void ff_ledger_release(uint64_t e);
/* The connection of entry e is closed: unlist it. */
void ff_ledger_close(uint64_t e);
/* fork: the child's ledger is its parent's; it makes its own when it gets links. */
void ff_ledger_atfork_prepare(void);
void ff_ledger_atfork_locked(void);	/* after the table lock */
void ff_ledger_atfork_parent(void);
void ff_ledger_atfork_child(void);
/* On a session just opened after one broke: LEDGER again, if there is a ledger. */
int ff_ledger_resend(struct ff_agent *a);

/* ---- listeners.c: keeping the agent's listener table in step ---- */

/* The agent may have forgotten this process's listeners (session broke, fork). */
void ff_listeners_lost(void);
/* On a session just opened: re-send LISTEN if something was lost. 0 or -errno. */
int ff_listeners_resync(struct ff_agent *a);
/* LISTEN took: note who registered c (table lock held). */
void ff_listener_registered(struct ff_conn *c, int ok);
/*
 * Listener fd accepts by a route the shim does not see (why: io_uring):
 * UNLISTEN if this process registered it, its links closed, and it is not
 * registered again, so its connectors take the overlay at once
 * (listener-not-freeflow) instead of waiting for an ACCEPT that cannot
 * come. Nothing if fd is no listener or was withdrawn already.
 */
void ff_listener_withdraw(int fd, const char *why);

/* ---- epoll.c (table lock held) ---- */
void ff_epoll_arm_pending(int fd, struct ff_conn *c);

/* ---- epoll_shm.c (table lock held) ---- */
/*
 * fd's connection was decided (swapped or not) or moved down from shm:
 * its epoll registrations regs (made before the decision) go to the file
 * now at fd, shm registrations of a moved one to its kernel socket.
 */
void ff_epoll_replay(int fd, struct ff_epreg *regs, int swapped);

/* ---- fork.c ---- */
void ff_fork_init(void);
/* Whether this is a vfork child, which shares the parent's memory: change nothing. */
int ff_vforked(void);

/* ---- exec.c: swapped connections carried across exec ---- */
/* In the new image, at init (table ready): adopt what the old image described. */
void ff_exec_restore(void);

/*
 * ---- Entry helpers: for exported functions only ----
 * An exported function starts the library (ff_init(), once per process)
 * before it reaches the fd table or ff_real: REAL(fn), ff_slot_enter(fd)
 * or ff_init() comes first. Code below the wrappers never starts the
 * library (ff_fd_slot() does not): it runs after a wrapper did, or on a
 * thread the library started. Built with -DFF_CHECK_INIT (make
 * test-asan), ff_fd_slot() aborts when start-up has not made the table
 * yet, so a path that skips the entry is found, not read as "untracked".
 */

#define REAL(fn) (ff_init(), ff_real.fn)

/* The wrappers: the only symbols libfreeflow.map lets out. */
#define FF_EXPORT __attribute__((visibility("default")))

/* ff_fd_slot() for a wrapper that has not started the library yet. */
static inline struct ff_slot *ff_slot_enter(int fd)
{
	ff_init();
	return ff_fd_slot(fd);
}

/* Before a data call on fd: ff_settle_slow() if its decision is pending, else 0. */
static inline int ff_settle(int fd, int nonblock)
{
	struct ff_slot *s = ff_slot_enter(fd);

	/*
	 * Relaxed is enough: a data call racing with the connect() that sets
	 * PENDING in another thread has no order to respect, and the slow path
	 * re-checks under the table lock.
	 */
	if (!s || !(atomic_load_explicit(&s->flags, memory_order_relaxed) & FF_FD_PENDING))
		return 0;
	return ff_settle_slow(fd, nonblock);
}

#endif
