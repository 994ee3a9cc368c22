/* SPDX-License-Identifier: MIT */
/*
 * exec: swapped connections carried into the new image (at length:
 * docs/LIBRARY.md, "exec").
 *
 * The new image starts with an empty fd table, so it would answer
 * getpeername/getsockname with the channel's own names (AF_UNIX, or fabric
 * addresses a container must never learn) and treat TCP-level options as
 * native. So every exec entry point (and posix_spawn, wrapped because its
 * child calls libc's internal execve) adds FREEFLOW_EXEC_FDS, a description
 * of the swapped fds that survive it, to the envp the kernel gets (the
 * caller's environment is not touched). The new image's library takes the
 * variable out of its environment in a constructor (before main, while it
 * has one thread) and adopts an fd only if the socket's inode still
 * matches, so a stale or forged variable describes nothing. Registered
 * listeners are carried too (carried_state).
 *
 * Which fds: for exec, those without FD_CLOEXEC; for posix_spawn with file
 * actions, every swapped one. Shm connections among them are moved down
 * first in the calling process, except in a vfork child.
 *
 * vfork: a vfork child shares the parent's memory, so these wrappers
 * allocate nothing: the variable and the new envp live on the stack (at
 * most FF_EXEC_VAR_MAX + 8 * FF_EXEC_ENV_MAX bytes), the numbers are
 * formatted by hand, the fd table is only read (its lock is never held
 * across a blocking call). What does not fit is not described
 * (FREEFLOW_DEBUG says so).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent.h"
#include "core/core.h"
#include "proc/proc.h"
#include "setup/setup.h"
#include "shm/shm.h"

#define VAR		"FREEFLOW_EXEC_FDS"
#define FF_EXEC_VAR_MAX	8192
#define FF_EXEC_ENV_MAX	2048

extern char **environ;

/* ---- the old image: describe ---- */

struct out {
	char *p;
	size_t len, cap;
	int full;
};

static void put_c(struct out *o, char c)
{
	if (o->len + 1 < o->cap)
		o->p[o->len++] = c;
	else
		o->full = 1;
}

static void put_u(struct out *o, unsigned long long v, unsigned int base)
{
	char t[24];
	int n = 0;

	do {
		t[n++] = "0123456789abcdef"[v % base];
		v /= base;
	} while (v);
	while (n)
		put_c(o, t[--n]);
}

static void put_i(struct out *o, long long v)
{
	if (v < 0) {
		put_c(o, '-');
		put_u(o, 0ull - (unsigned long long)v, 10);
	} else {
		put_u(o, (unsigned long long)v, 10);
	}
}

static void put_hex(struct out *o, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++) {
		put_c(o, "0123456789abcdef"[b[i] >> 4]);
		put_c(o, "0123456789abcdef"[b[i] & 15]);
	}
}

/*
 * Swapped connections, and registered listeners: the agent keeps the
 * registration (exec keeps the pid; a forked child's parent has it), so
 * the new image must go on negotiating what it accepts, or every
 * connector would wait for an ACCEPT that never comes.
 */
static int carried_state(const struct ff_conn *c)
{
	/* Still on shm: broken, or in a vfork child, where nothing may move down. */
	return (c->state == FF_ST_SWAPPED && !c->shm) ||
	       (c->state == FF_ST_LISTEN && c->registered);
}

/* Table lock held: append fd's entry, or nothing if it does not fit. */
static int put_entry(struct out *o, int fd, const struct ff_conn *c, unsigned long long ino)
{
	size_t mark = o->len;

	if (mark > sizeof(VAR))
		put_c(o, ';');
	put_u(o, (unsigned int)fd, 10);
	put_c(o, ',');
	put_u(o, ino, 16);
	put_c(o, ',');
	put_u(o, (unsigned int)c->kern_family, 10);
	if (c->moved)
		put_c(o, 'm');
	put_c(o, ',');
	put_hex(o, &c->ends.local, c->ends.local_len);
	put_c(o, ',');
	if (c->state == FF_ST_SWAPPED) {
		put_hex(o, &c->ends.remote, c->ends.remote_len);
	} else {
		put_c(o, 'L');
		put_u(o, (unsigned int)c->reg_pid, 10);
	}
	put_c(o, ',');
	for (int i = 0; i < c->nopts; i++) {
		if (i)
			put_c(o, '/');
		put_i(o, c->opts[i].level);
		put_c(o, '.');
		put_i(o, c->opts[i].name);
		put_c(o, '.');
		put_i(o, c->opts[i].value);
	}
	if (!o->full)
		return 1;
	o->len = mark;
	return 0;
}

/*
 * "FREEFLOW_EXEC_FDS=..." into buf for the swapped fds that survive the
 * exec (all: every swapped fd). Returns how many were described.
 */
static int describe(char *buf, size_t cap, int all)
{
	struct out o = { .p = buf, .cap = cap };
	int n = 0, dropped = 0, hw;

	for (const char *v = VAR "="; *v; v++)
		put_c(&o, *v);
	ff_table_lock();
	hw = ff_table_hiwater();
	for (int fd = 0; fd <= hw; fd++) {
		struct ff_slot *s = ff_fd_slot(fd);
		struct stat st;
		int fl;

		if (!(atomic_load_explicit(&s->flags, memory_order_relaxed) & FF_FD_TRACKED) ||
		    !s->conn || !carried_state(s->conn))
			continue;
		fl = ff_real.fcntl(fd, F_GETFD);
		if (fl < 0 || (!all && (fl & FD_CLOEXEC)) || fstat(fd, &st))
			continue;
		o.full = 0;
		if (put_entry(&o, fd, s->conn, (unsigned long long)st.st_ino))
			n++;
		else
			dropped++;
	}
	ff_table_unlock();
	buf[o.len] = '\0';
	if (dropped)
		ff_debug("exec: %d swapped fds not described (no room), they show their channel's names",
			 dropped);
	return n;
}

static size_t env_count(char *const envp[])
{
	size_t n = 0;

	while (envp && envp[n])
		n++;
	return n;
}

static int is_ours(const char *e)
{
	return !strncmp(e, VAR "=", sizeof(VAR));
}

/* env = envp without any old description, plus var; env has n + 2 slots. */
static void build_env(char **env, char *const envp[], size_t n, char *var)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		if (!is_ours(envp[i]))
			env[k++] = envp[i];
	env[k++] = var;
	env[k] = NULL;
}

/* What finally runs: one of libc's exec functions or posix_spawn(p). */
enum how { BY_PATH, BY_SEARCH, BY_FD, SPAWN, SPAWNP };

struct call {
	enum how how;
	const char *file;
	int fd;
	char *const *argv;
	pid_t *pid;
	const posix_spawn_file_actions_t *fa;
	const posix_spawnattr_t *attr;
};

/* Returns what the function returns (-1 for exec, an error number for spawn). */
static int run(const struct call *c, char *const envp[])
{
	switch (c->how) {
	case BY_PATH:	return REAL(execve)(c->file, c->argv, envp);
	case BY_SEARCH:	return REAL(execvpe)(c->file, c->argv, envp);
	case BY_FD:	return REAL(fexecve)(c->fd, c->argv, envp);
	case SPAWN:	return REAL(posix_spawn)(c->pid, c->file, c->fa, c->attr, c->argv, envp);
	case SPAWNP:	return REAL(posix_spawnp)(c->pid, c->file, c->fa, c->attr, c->argv, envp);
	}
	return -1;
}

static int run_carrying(const struct call *c, char *const envp[])
{
	char var[FF_EXEC_VAR_MAX];
	size_t n = env_count(envp);
	int all = (c->how == SPAWN || c->how == SPAWNP) && c->fa;

	ff_init();
	if (!ff_busy && !ff_vforked())
		ff_shm_switch_all(all ? 0 : FF_SHM_SWITCH_KEPT);
	if (ff_busy || !describe(var, sizeof(var), all))
		return run(c, envp);
	if (n >= FF_EXEC_ENV_MAX) {
		ff_debug("exec: %zu environment entries, swapped fds not described", n);
		return run(c, envp);
	}
	{
		char *env[n + 2];

		build_env(env, envp, n, var);
		return run(c, env);
	}
}

FF_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
	struct call c = { .how = BY_PATH, .file = path, .argv = argv };

	return run_carrying(&c, envp);
}

FF_EXPORT int execv(const char *path, char *const argv[])
{
	return execve(path, argv, environ);
}

FF_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
	struct call c = { .how = BY_SEARCH, .file = file, .argv = argv };

	return run_carrying(&c, envp);
}

FF_EXPORT int execvp(const char *file, char *const argv[])
{
	return execvpe(file, argv, environ);
}

FF_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
	struct call c = { .how = BY_FD, .fd = fd, .argv = argv };

	return run_carrying(&c, envp);
}

FF_EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
			  const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	struct call c = { .how = SPAWN, .file = path, .argv = argv, .pid = pid, .fa = fa,
			  .attr = attr };

	return run_carrying(&c, envp);
}

FF_EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
			   const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
	struct call c = { .how = SPAWNP, .file = file, .argv = argv, .pid = pid, .fa = fa,
			  .attr = attr };

	return run_carrying(&c, envp);
}

/*
 * The execl family: the argument list becomes an argv on the stack (as in
 * libc), then the matching exec above; execle's envp follows the NULL.
 */
static size_t count_args(const char *arg, va_list *ap)
{
	size_t n = 0;

	for (const char *a = arg; a; a = va_arg(*ap, const char *))
		n++;
	return n;
}

/* argv[0..n]; consumes the arguments up to and including the NULL. */
static void fill_args(char **argv, size_t n, const char *arg, va_list *ap)
{
	argv[0] = (char *)arg;
	for (size_t i = 1; i < n; i++)
		argv[i] = va_arg(*ap, char *);
	if (n)
		(void)va_arg(*ap, char *);
	argv[n] = NULL;
}

/* execl, execlp, execle: which exec the built argv goes to, and which envp. */
enum list_how { L_PATH, L_SEARCH, L_ENV };

/* The arguments at *ap are counted on a copy, then consumed into the argv. */
static int exec_list(enum list_how how, const char *file, const char *arg, va_list *ap)
{
	char *const *envp = environ;
	va_list count;
	size_t n;

	va_copy(count, *ap);
	n = count_args(arg, &count);
	va_end(count);
	{
		char *argv[n + 1];

		fill_args(argv, n, arg, ap);
		if (how == L_ENV)
			envp = va_arg(*ap, char *const *);
		if (how == L_SEARCH)
			return execvpe(file, argv, envp);
		return execve(file, argv, envp);
	}
}

FF_EXPORT int execl(const char *path, const char *arg, ...)
{
	va_list ap;
	int ret;

	va_start(ap, arg);
	ret = exec_list(L_PATH, path, arg, &ap);
	va_end(ap);
	return ret;
}

FF_EXPORT int execlp(const char *file, const char *arg, ...)
{
	va_list ap;
	int ret;

	va_start(ap, arg);
	ret = exec_list(L_SEARCH, file, arg, &ap);
	va_end(ap);
	return ret;
}

FF_EXPORT int execle(const char *path, const char *arg, ...)
{
	va_list ap;
	int ret;

	va_start(ap, arg);
	ret = exec_list(L_ENV, path, arg, &ap);
	va_end(ap);
	return ret;
}

/* ---- the new image: adopt ---- */

static char carried[FF_EXEC_VAR_MAX];

/*
 * Before main, single-threaded: take the description out of the
 * environment, so the program and its own children never see it.
 */
__attribute__((constructor)) static void take_description(void)
{
	const char *v = getenv(VAR);

	if (!v)
		return;
	if (strlen(v) < sizeof(carried))
		memcpy(carried, v, strlen(v) + 1);
	unsetenv(VAR);
}

struct desc {
	int fd, kern, moved;
	unsigned long long ino;
	struct ff_conn *conn;
};

#define FF_EXEC_MAX_DESC	256

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* A field up to ',' (or end) as a sockaddr; 0 on success. */
static int parse_addr(char **p, struct sockaddr_storage *ss, socklen_t *len)
{
	size_t n = 0;

	memset(ss, 0, sizeof(*ss));
	while (**p && **p != ',') {
		int hi = hexval((*p)[0]), lo = hi < 0 ? -1 : hexval((*p)[1]);

		if (lo < 0 || n == sizeof(*ss))
			return -1;
		((unsigned char *)ss)[n++] = (unsigned char)(hi << 4 | lo);
		*p += 2;
	}
	*len = (socklen_t)n;
	if (ss->ss_family == AF_INET)
		return n == sizeof(struct sockaddr_in) ? 0 : -1;
	return ss->ss_family == AF_INET6 && n == sizeof(struct sockaddr_in6) ? 0 : -1;
}

static int parse_opts(char *p, struct ff_conn *c)
{
	while (*p && c->nopts < FF_MAX_OPTS) {
		struct ff_opt *o = &c->opts[c->nopts++];

		o->level = (int)strtol(p, &p, 10);
		if (*p++ != '.')
			return -1;
		o->name = (int)strtol(p, &p, 10);
		if (*p++ != '.')
			return -1;
		o->value = (int)strtol(p, &p, 10);
		if (*p == '/')
			p++;
		else if (*p)
			return -1;
	}
	return 0;
}

/*
 * A listener's entry: "L<pid that registered it>". Registered by another
 * process (exec after fork), the new image's first agent session registers
 * it in this one's name too (listeners.c).
 */
static void parse_listener(char **p, struct ff_conn *c)
{
	c->state = FF_ST_LISTEN;
	c->registered = 1;
	c->reg_pid = (pid_t)strtol(*p + 1, p, 10);
	if (c->reg_pid != getpid())
		ff_listeners_lost();
}

/* The names and options of an entry into c; 0 on success. */
static int parse_conn(char *p, struct ff_conn *c)
{
	int listener;

	if (parse_addr(&p, &c->ends.local, &c->ends.local_len) || *p++ != ',')
		return -1;
	listener = *p == 'L';
	if (listener)
		parse_listener(&p, c);
	else if (parse_addr(&p, &c->ends.remote, &c->ends.remote_len) ||
		 c->ends.local.ss_family != c->ends.remote.ss_family)
		return -1;
	else
		c->state = FF_ST_SWAPPED;
	if (*p++ != ',')
		return -1;
	return parse_opts(p, c);
}

/* One entry (NUL-terminated) into d with a new conn; 0 on success. */
static int parse_entry(char *e, struct desc *d)
{
	struct ff_conn *c;
	char *p = e;

	d->fd = (int)strtol(p, &p, 10);
	if (*p++ != ',')
		return -1;
	d->ino = strtoull(p, &p, 16);
	if (*p++ != ',')
		return -1;
	d->kern = (int)strtol(p, &p, 10);
	d->moved = *p == 'm';
	p += d->moved;
	if (*p++ != ',' || (d->kern != AF_UNIX && d->kern != AF_INET && d->kern != AF_INET6))
		return -1;
	c = ff_conn_new(AF_INET);
	if (!c)
		return -1;
	if (parse_conn(p, c)) {
		ff_conn_free(c);
		return -1;
	}
	c->family = c->ends.local.ss_family;
	c->kern_family = d->kern;
	c->moved = d->moved;
	/* Listed in this image's ledger (ff_ledger_inherited), so CLOSED at its last close. */
	c->answered = c->state == FF_ST_SWAPPED;
	d->conn = c;
	return 0;
}

/* Table lock held: fd is the described socket d (same inode and family)? */
static int same_socket(int fd, const struct desc *d)
{
	struct stat st;
	int dom = 0;
	socklen_t dl = sizeof(dom);

	return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) &&
	       (unsigned long long)st.st_ino == d->ino &&
	       ff_real.getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &dl) == 0 && dom == d->kern;
}

static void adopt(struct desc *d, int nd)
{
	int maxfd = 2;

	for (int i = 0; i < nd; i++)
		if (d[i].fd > maxfd)
			maxfd = d[i].fd;
	ff_table_lock();
	for (int fd = 0; fd <= maxfd; fd++) {
		struct ff_slot *s = ff_fd_slot(fd);

		for (int i = 0; s && !s->conn && i < nd; i++) {
			if (same_socket(fd, &d[i])) {
				ff_fd_attach(fd, d[i].conn);
				if (d[i].conn->state == FF_ST_SWAPPED)
					atomic_store(&ff_ledger_inherit_pending, 1);
				break;
			}
		}
	}
	for (int i = 0; i < nd; i++)
		if (!d[i].conn->refs)
			ff_conn_free(d[i].conn);
	ff_table_unlock();
}

/* At init, table ready, no wrapped call allowed (see start.c). */
void ff_exec_restore(void)
{
	struct desc d[FF_EXEC_MAX_DESC];
	char *save = NULL, *e;
	int nd = 0;

	if (!carried[0])
		return;
	for (e = strtok_r(carried, ";", &save); e && nd < FF_EXEC_MAX_DESC;
	     e = strtok_r(NULL, ";", &save))
		if (parse_entry(e, &d[nd]) == 0)
			nd++;
	carried[0] = '\0';
	if (nd)
		adopt(d, nd);
}
