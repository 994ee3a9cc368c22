/* SPDX-License-Identifier: MIT */
/*
 * Harness for the shim tests. A test's main() calls t_shim_setup() first:
 * the unpreloaded process starts the fake agent (fake_agent.h) on a
 * temporary socket and runs itself again with LD_PRELOAD=libfreeflow.so
 * and FREEFLOW_AGENT_SOCKET set; setup returns in that preloaded image,
 * where the test runs its client and server (forked, so both ends are real
 * separate processes with the library). t_shim_finish() gives the exit code.
 *
 * The preloaded image runs as a container's processes do: in a pid
 * namespace (and with a /proc) of its own, below the agent's. The library
 * trusts only an agent it cannot see from there (pid 0 from SO_PEERCRED;
 * lib/src/agent/session.c), so the fake agent passes the check the way a real
 * one does. The first process stays outside as the "host": it keeps the
 * agent, and the test asks it, over keeper.sock in the test's directory,
 * to stop or restart it or to hand over one of its fds (t_keeper), since
 * nothing the test starts can be outside its own pid namespace. When the
 * test exits, it stops the agent, removes the test's directory and exits
 * with the test's code.
 *
 * The tests look behind the shim with raw system calls (t_real_domain), and
 * at the agent's log (t_agent_count), to check that a swap really happened
 * while the program itself sees no difference. All traffic is on loopback.
 */
#ifndef FREEFLOW_SHIMTEST_H
#define FREEFLOW_SHIMTEST_H

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/mount.h>
#include <sys/select.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>

#include "fake_agent.h"
#include "freeflow/ledger_layout.h"
#include "testutil.h"

/*
 * A system call past the shim: libc's own syscall(), found in libc itself
 * (the shim's syscall() sends the numbers it wraps to its wrappers).
 */
static inline long (*t_raw_fn(void))(long, ...)
{
	static long (*fn)(long, ...);

	if (!fn) {
		void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);

		fn = libc ? (long (*)(long, ...))dlsym(libc, "syscall") : NULL;
		if (!fn) {
			fprintf(stderr, "libc's syscall not found: %s\n", dlerror());
			exit(T_EXIT_FAIL);
		}
	}
	return fn;
}
#define t_raw(...)	(t_raw_fn()(__VA_ARGS__))

/* Scheduling noise on a loaded 2-core machine, not a protocol allowance. */
#define T_SLACK_MS	150
/* Below the agent's 50 ms peer wait: a call this fast did not wait for anyone. */
#define T_NO_WAIT_MS	45

static char t_dir[PATH_MAX];

static inline int64_t t_ms(void)
{
	return fa_now();
}

static inline void t_path(char *out, size_t cap, const char *name)
{
	snprintf(out, cap, "%s/%s", getenv("FF_TEST_DIR"), name);
}

/* A SOCK_SEQPACKET socket listening at path, or -1 (said on stderr). */
static inline int t_listen_unix(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -1;
	memcpy(sa.sun_path, path, strlen(path));
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (void *)&sa, sizeof(sa)) || listen(fd, 64)) {
		perror(path);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/*
 * Start a fake agent on dir/agent.sock, logging to dir/agent.log, in a child
 * of this process. This process calls listen(), so SO_PEERCRED names it.
 */
static inline pid_t t_start_agent(const char *dir, enum fa_mode mode)
{
	char sock[PATH_MAX + 16], log[PATH_MAX + 16];
	pid_t parent = getpid(), pid;
	int lfd, logfd;

	snprintf(sock, sizeof(sock), "%s/agent.sock", dir);
	snprintf(log, sizeof(log), "%s/agent.log", dir);
	lfd = t_listen_unix(sock);
	logfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (lfd < 0 || logfd < 0) {
		perror("fake agent");
		exit(T_EXIT_FAIL);
	}
	pid = fork();
	if (pid == 0)
		fa_run(lfd, mode, logfd, parent, dir);
	close(lfd);
	close(logfd);
	return pid;
}

/* Kill *agent (0: none) and reap it. */
static inline void t_stop(pid_t *agent)
{
	if (*agent > 0) {
		kill(*agent, SIGKILL);
		waitpid(*agent, NULL, 0);
	}
	*agent = 0;
}

/*
 * The "host" side of a request on keeper.sock: "stop" (the agent is killed,
 * as a crash would), "start <mode>" (a new agent, with an empty state as a
 * restarted one has, once the old one is stopped), "fd <n>" (the agent's
 * fd n, passed back). Every answer is "ok" or "no", with the fd if any.
 */
static inline void t_keep_answer(int c, pid_t *agent)
{
	char req[64] = "", path[PATH_MAX + 16];
	ssize_t n = recv(c, req, sizeof(req) - 1, 0);
	int mode, fd = -1, ok = 1;

	if (n > 0 && !strcmp(req, "stop")) {
		t_stop(agent);
	} else if (n > 0 && sscanf(req, "start %d", &mode) == 1) {
		t_stop(agent);
		snprintf(path, sizeof(path), "%s/agent.sock", t_dir);
		unlink(path);	/* the dead agent's, as a restarted agent finds it */
		*agent = t_start_agent(t_dir, (enum fa_mode)mode);
	} else if (n > 0 && sscanf(req, "fd %d", &fd) == 1) {
		snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)*agent, fd);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		ok = fd >= 0;
	} else {
		ok = 0;
	}
	t_send_fds(c, ok ? "ok" : "no", 2, &fd, fd >= 0);
	if (fd >= 0)
		close(fd);
	close(c);
}

/* Serve keeper.sock until the test's namespace (its first process, init) exits; its code. */
static inline int t_keep(int klfd, pid_t init, pid_t *agent)
{
	int pidfd = (int)t_raw(SYS_pidfd_open, init, 0), st;

	while (pidfd >= 0) {
		struct pollfd p[2] = { { .fd = klfd, .events = POLLIN },
				       { .fd = pidfd, .events = POLLIN } };

		if (poll(p, 2, -1) < 0 && errno != EINTR) {
			perror("keeper poll");
			break;
		}
		if (p[1].revents)
			break;
		if (p[0].revents) {
			int c = accept4(klfd, NULL, NULL, SOCK_CLOEXEC);

			if (c >= 0)
				t_keep_answer(c, agent);
		}
	}
	if (pidfd < 0)
		perror("pidfd_open: the test's requests go unanswered");
	else
		close(pidfd);
	if (waitpid(init, &st, 0) != init)
		return T_EXIT_FAIL;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/*
 * The first process of the test's pid namespace: mounts the namespace's
 * own /proc, runs the preloaded test (argv) and reaps whatever is
 * orphaned until the test exits; its code.
 */
static inline int t_init(char **argv)
{
	pid_t test;
	int st;

	if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
	    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL)) {
		perror("a pid namespace with its own /proc for the test");
		return T_EXIT_FAIL;
	}
	test = fork();
	if (test == 0) {
		execv("/proc/self/exe", argv);
		perror("exec self");
		_exit(T_EXIT_FAIL);
	}
	for (;;) {
		pid_t p = wait(&st);

		if (p == test)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		if (p < 0 && errno != EINTR)
			return T_EXIT_FAIL;
	}
}

/*
 * Stage 1 (no preload): agent up, environment set, the test run preloaded
 * in a pid namespace of its own, kept (t_keep) and cleaned up after.
 * mode -1: no agent at all (the socket path does not exist).
 */
static inline void t_shim_setup(char **argv, int mode)
{
	const char *lib = getenv("FF_LIBRARY"), *pre = getenv("FF_TEST_PRELOAD_EXTRA");
	char abs[PATH_MAX], path[PATH_MAX + 16], env[3 * PATH_MAX];
	pid_t agent = 0, init;
	int klfd, code;

	if (pre && !*pre)
		pre = NULL;
	if (getenv("FF_TEST_DIR")) {
		snprintf(t_dir, sizeof(t_dir), "%s", getenv("FF_TEST_DIR"));
		return;
	}
	if (!lib || !realpath(lib, abs)) {
		printf("FF_LIBRARY must name the built libfreeflow.so\n");
		exit(T_EXIT_SKIP);
	}
	snprintf(t_dir, sizeof(t_dir), "/tmp/fftest.XXXXXX");
	if (!mkdtemp(t_dir)) {
		perror("mkdtemp");
		exit(T_EXIT_FAIL);
	}
	snprintf(path, sizeof(path), "%s/agent.log", t_dir);
	close(open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
	if (mode >= 0)
		agent = t_start_agent(t_dir, (enum fa_mode)mode);
	snprintf(path, sizeof(path), "%s/keeper.sock", t_dir);
	klfd = t_listen_unix(path);
	if (klfd < 0)
		exit(T_EXIT_FAIL);
	setenv("FF_TEST_DIR", t_dir, 1);
	snprintf(path, sizeof(path), "%s/agent.sock", t_dir);
	setenv("FREEFLOW_AGENT_SOCKET", path, 1);
	/* The fake agent runs on loopback; a test about loopback itself sets "0" first. */
	setenv("FREEFLOW_NEGOTIATE_LOOPBACK", "1", 0);
	snprintf(env, sizeof(env), "%s%s%s", pre ? pre : "", pre ? " " : "", abs);
	setenv("LD_PRELOAD", env, 1);
	fflush(NULL);
	init = (pid_t)t_raw(SYS_clone, CLONE_NEWPID | SIGCHLD, 0, 0, 0, 0);
	if (init == 0)
		_exit(t_init(argv));
	code = init < 0 ? T_EXIT_FAIL : t_keep(klfd, init, &agent);
	if (init < 0)
		perror("clone a pid namespace for the test");
	t_stop(&agent);
	fa_cleanup(t_dir);
	exit(code);
}

static inline int t_shim_finish(void)
{
	return t_exit_code();
}

/*
 * t_shim_setup (broker) with hide_symbol.so preloaded (t_preload_spy): the
 * library's recv() counts per fd, or NULL, CHECKed, if it is not there.
 */
static inline _Atomic unsigned *t_setup_counting_recvs(char **argv)
{
	_Atomic unsigned *recvs;

	t_preload_spy();
	t_shim_setup(argv, FA_BROKER);
	recvs = t_lib_recvs();
	CHECK(recvs, "hide_symbol.so is not preloaded: no counts of the library's recv()");
	return recvs;
}

/* Ask the host side (t_keep_answer) for req; 0 if done, with the fd it passed in *fd. */
static inline int t_keeper(const char *req, int *fd)
{
	char path[PATH_MAX + 16];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), got = -1, ok;
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} ctl;
	char ans[8] = "";
	struct iovec iov = { ans, sizeof(ans) - 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = ctl.b, .msg_controllen = sizeof(ctl.b) };
	struct cmsghdr *cm;

	t_path(path, sizeof(path), "keeper.sock");
	ok = strlen(path) < sizeof(sa.sun_path);
	if (ok)
		memcpy(sa.sun_path, path, strlen(path));
	ok = ok && c >= 0 && connect(c, (void *)&sa, sizeof(sa)) == 0 &&
	     send(c, req, strlen(req) + 1, MSG_NOSIGNAL) > 0 &&
	     recvmsg(c, &mh, MSG_CMSG_CLOEXEC) > 0 && !strcmp(ans, "ok");
	cm = CMSG_FIRSTHDR(&mh);
	if (cm && cm->cmsg_type == SCM_RIGHTS)
		memcpy(&got, CMSG_DATA(cm), sizeof(int));
	if (c >= 0)
		close(c);
	if (fd)
		*fd = got;
	else if (got >= 0)
		close(got);
	return ok ? 0 : -1;
}

/* Kill the agent, as a crash would. */
static inline void t_stop_agent(void)
{
	if (t_keeper("stop", NULL)) {
		printf("the host side did not stop the agent\n");
		exit(T_EXIT_FAIL);
	}
}

/*
 * Kill the agent and start a new one on the same socket, with an empty
 * state as a restarted agent has, outside the test's pid namespace like
 * the first one. Returns once it accepts connections.
 */
static inline void t_restart_agent(enum fa_mode mode)
{
	char req[32];

	snprintf(req, sizeof(req), "start %d", (int)mode);
	if (t_keeper(req, NULL)) {
		printf("the host side did not restart the agent\n");
		exit(T_EXIT_FAIL);
	}
}

/* Lines of the agent log that start with word. */
static inline int t_agent_count(const char *word)
{
	char p[PATH_MAX + 16], line[256];
	FILE *f;
	int n = 0;

	t_path(p, sizeof(p), "agent.log");
	f = fopen(p, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		n += !strncmp(line, word, strlen(word));
	fclose(f);
	return n;
}

/*
 * The count of word once it reaches want, or what it is after 2 s: for
 * notifications (CLOSED), which the library sends without waiting, so the
 * agent may log them a moment after the call that sent them returned.
 */
static inline int t_agent_await(const char *word, int want)
{
	int64_t end = t_ms() + 2000;
	int n;

	while ((n = t_agent_count(word)) < want && t_ms() < end)
		usleep(1000);
	return n;
}

/*
 * The sum of fn over the ledgers of the processes of this test: the fake
 * agent keeps each ledger's memfd open and logs its fd ("ledger <fd>"),
 * which the host side hands over (t_keeper; docs/PROTOCOL.md, "The
 * ledger", and include/freeflow/ledger_layout.h have the layout).
 */
static inline int t_ledger_sum(long (*fn)(int lfd, const void *arg), const void *arg)
{
	char p[PATH_MAX + 16], line[256];
	long total = 0;
	FILE *f;
	int lfd;

	t_path(p, sizeof(p), "agent.log");
	f = fopen(p, "r");
	if (!f)
		return -1;
	/* A ledger sent again (a new session) is the same memfd: counted once. */
	ino_t seen[64];
	int nseen = 0;

	while (fgets(line, sizeof(line), f)) {
		char magic[4];
		struct stat sb;
		int dup = 0;

		if (sscanf(line, "ledger %d", &lfd) != 1)
			continue;
		snprintf(p, sizeof(p), "fd %d", lfd);
		if (t_keeper(p, &lfd) || lfd < 0)
			continue;
		/* A line of an agent since restarted names an fd of another file, or none. */
		fstat(lfd, &sb);
		for (int i = 0; i < nseen; i++)
			dup |= seen[i] == sb.st_ino;
		if (dup || nseen == 64 || pread(lfd, magic, 4, 0) != 4 ||
		    memcmp(magic, FF_LEDGER_MAGIC, 4)) {
			close(lfd);
			continue;
		}
		seen[nseen++] = sb.st_ino;
		total += fn(lfd, arg);
		close(lfd);
	}
	fclose(f);
	return (int)total;
}

/* Linked connections a ledger says its process ever opened, shm and host-tcp. */
static inline long t_ledger_opened(int lfd, const void *arg)
{
	uint64_t n[2] = { 0 };

	(void)arg;
	if (pread(lfd, &n[0], 8, FF_LEDGER_OFF_OPENED) != 8 ||
	    pread(lfd, &n[1], 8, FF_LEDGER_OFF_OPENED_TCP) != 8)
		return 0;
	return (long)(n[0] + n[1]);
}

/* Which live entries t_ledger_live counts: path -1 any, reason NULL any. */
struct t_ledger_want {
	int path;
	const char *reason;
};

/*
 * Also checks what the agent relies on: every live entry is below the
 * header's used (read after the entries: the library stores it first), and
 * used_kept is 1 (else the agent reads the whole ledger).
 */
static inline long t_ledger_live(int lfd, const void *arg)
{
	const struct t_ledger_want *w = arg;
	uint8_t e[FF_LEDGER_ENTRY];
	uint32_t seq, used = 0, kept = 0;
	long n = 0, last = -1, i = 0;

	for (off_t at = FF_LEDGER_HDR; pread(lfd, e, sizeof(e), at) == sizeof(e);
	     at += FF_LEDGER_ENTRY, i++) {
		memcpy(&seq, e + FF_LEDGER_E_SEQ, 4);
		if (seq & 1)
			last = i;
		n += (seq & 1) && (w->path < 0 || e[FF_LEDGER_E_PATH] == w->path) &&
		     (!w->reason || (e[FF_LEDGER_E_REASON_LEN] == strlen(w->reason) &&
				     !memcmp(e + FF_LEDGER_E_REASON, w->reason, strlen(w->reason))));
	}
	CHECK(pread(lfd, &used, 4, FF_LEDGER_OFF_USED) == 4 && last < (long)used,
	      "ledger entry %ld is live, but the header says %u were handed out: the agent reads no further",
	      last, used);
	CHECK(pread(lfd, &kept, 4, FF_LEDGER_OFF_USED_KEPT) == 4 && kept == 1,
	      "the ledger's used_kept is %u, not 1: the agent reads the whole ledger at every budget check",
	      kept);
	return n;
}

/*
 * Connection ends of the processes of this test, as their ledgers say: the
 * linked ones ever opened (live 0), or every one still open, linked or
 * answered by the agent (live 1).
 */
static inline int t_ledger_ends(int live)
{
	if (!live)
		return t_ledger_sum(t_ledger_opened, NULL);
	return t_ledger_sum(t_ledger_live, &(struct t_ledger_want){ -1, NULL });
}

/* Live ledger entries on path (a PATH_KIND) with that reason ("" none). */
static inline int t_ledger_entries(int path, const char *reason)
{
	return t_ledger_sum(t_ledger_live, &(struct t_ledger_want){ path, reason });
}

/* t_ledger_ends once it reaches want, or what it is after T_SLACK_MS. */
static inline int t_ledger_await(int live, int want)
{
	int64_t end = t_ms() + T_SLACK_MS;
	int n;

	while ((n = t_ledger_ends(live)) < want && t_ms() < end)
		usleep(1000);
	return n;
}

/*
 * Connections set up on a fast path, by the agent (a swap) or over a link
 * (an entry in the ledger of each end; waits up to T_SLACK_MS for want).
 */
static inline int t_fast_conns(void)
{
	return t_agent_count("swap") + t_ledger_ends(0) / 2;
}

static inline int t_fast_await(int want)
{
	int64_t end = t_ms() + T_SLACK_MS;

	while (t_fast_conns() < want && t_ms() < end)
		usleep(1000);
	return t_fast_conns();
}

/* The family of the socket really at fd, asked of the kernel past the shim. */
static inline int t_real_domain(int fd)
{
	int d = -1;
	socklen_t l = sizeof(d);

	if (t_raw(SYS_getsockopt, fd, SOL_SOCKET, SO_DOMAIN, &d, &l))
		return -errno;
	return d;
}

/* The family a channel of this run has: AF_UNIX, or AF_INET for host-tcp. */
static inline int t_channel_domain(void)
{
	return fa_host_tcp() ? AF_INET : AF_UNIX;
}

/* What the fake agent logs for a swap that grants a link: same host, or cross host. */
static inline const char *t_link_grant(void)
{
	return fa_xlink() ? "swap xlink" : "swap shm link";
}

/* What it logs for any swap: with an shm channel, or (cross host) any. */
static inline const char *t_link_swap(void)
{
	return fa_xlink() ? "swap" : "swap shm";
}

/*
 * Mappings of the fake agent's shm memfds ("ff-shm") in process pid (0:
 * this one); *first, if given, gets the start of the first (NULL if none).
 */
/* Mappings in process pid (0: this one) of memfds named name, the first at *first. */
static inline int t_maps_named(pid_t pid, const char *name, uint8_t **first)
{
	char path[64], line[512];
	unsigned long lo;
	FILE *f;
	int n = 0;

	if (pid)
		snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	else
		snprintf(path, sizeof(path), "/proc/self/maps");
	if (first)
		*first = NULL;
	if (!(f = fopen(path, "r")))
		return -1;
	while (fgets(line, sizeof(line), f)) {
		if (!strstr(line, name))
			continue;
		if (!n++ && first && sscanf(line, "%lx-", &lo) == 1)
			*first = (uint8_t *)lo;
	}
	fclose(f);
	return n;
}

/* Channels a connector made for a link offer, mapped in pid. */
static inline int t_kept_maps_of(pid_t pid)
{
	return t_maps_named(pid, "/memfd:freeflow-shm", NULL);
}

/*
 * Note in inodes (*n of them, at most cap) each memfd named name that this
 * process maps now, that is not noted yet and, unless keep is NULL, for
 * whose mapping at base keep says 1 (a memfd mapped twice counts once).
 */
static inline void t_note_maps(const char *name, int (*keep)(const uint8_t *base), unsigned long *inodes,
			       int *n, int cap)
{
	char line[512];
	unsigned long lo, ino;
	FILE *f = fopen("/proc/self/maps", "r");

	while (f && fgets(line, sizeof(line), f)) {
		int seen = 0;

		if (!strstr(line, name) || sscanf(line, "%lx-%*x %*s %*x %*s %lu", &lo, &ino) != 2 ||
		    (keep && !keep((const uint8_t *)lo)))
			continue;
		for (int i = *n - 1; i >= 0 && !seen; i--)
			seen = inodes[i] == ino;
		if (!seen && *n < cap)
			inodes[(*n)++] = ino;
	}
	if (f)
		fclose(f);
}

/*
 * Note each channel a connector made for a link offer that this process
 * maps now (t_note_maps): called after each connection, *n is how many
 * channels the links made.
 */
static inline void t_note_link_channels(unsigned long *inodes, int *n, int cap)
{
	t_note_maps("/memfd:freeflow-shm", NULL, inodes, n, cap);
}

/*
 * Offsets in a channel's mapping (docs/SHM.md, "Layout"): ring 0's spill
 * word (ring 0 is the connector's tx), and a page of ring 0's data past
 * FF_SHM_KEEP, in memory only while a burst holds it.
 */
#define T_SPILL0	(FF_SHM_OFF_CTL0 + FF_SHM_CTL_SPILL)
#define T_PAST_KEEP0	(FF_SHM_HDR_SIZE + FF_SHM_KEEP + 4096)

/* T_BURST bytes of 0xab from cfd, written whole before sfd reads them all: ring 0 past FF_SHM_KEEP, drained. */
#define T_BURST		(FF_SHM_KEEP + (64u << 10))
static inline void t_burst_past_keep(int cfd, int sfd)
{
	static uint8_t out[T_BURST], in[T_BURST];

	memset(out, 0xab, sizeof(out));
	CHECK(send(cfd, out, T_BURST, MSG_DONTWAIT) == (ssize_t)T_BURST, "burst of %u not taken at once", T_BURST);
	CHECK(recv(sfd, in, T_BURST, MSG_WAITALL) == (ssize_t)T_BURST && !memcmp(in, out, T_BURST), "burst lost");
}

/* Whether the page at p, in a mapping of a channel, is in memory (mincore: no touch, no fault). */
static inline int t_page_resident(const void *p)
{
	unsigned char v = 0;

	return mincore((void *)((uintptr_t)p & ~(uintptr_t)4095), 4096, &v) == 0 && (v & 1);
}

static inline int t_burst_held_at(const uint8_t *base)
{
	return t_page_resident(base + T_PAST_KEEP0);
}

/*
 * Wait (at most 2 s) until no more than want of the fake agent's channels
 * this process maps hold a page of ring 0 past KEEP (each is mapped once
 * per end here, counted once): how many still do; *ms, how long it took.
 */
static inline int t_await_bursts_held(int want, int64_t *ms)
{
	int64_t start = t_ms();
	int n;

	for (;;) {
		unsigned long seen[256];

		n = 0;
		t_note_maps("/memfd:ff-shm", t_burst_held_at, seen, &n, 256);
		if (n <= want || t_ms() - start >= 2000)
			break;
		usleep(5000);
	}
	*ms = t_ms() - start;
	return n;
}

/* Shm channels mapped in pid: the fake agent's memfds, or a connector's for a link offer. */
static inline int t_shm_maps_of(pid_t pid, uint8_t **first)
{
	int n = t_maps_named(pid, "/memfd:ff-shm", first);
	uint8_t *kept;
	int k = t_maps_named(pid, "/memfd:freeflow-shm", &kept);

	if (n < 0 || k < 0)
		return -1;
	if (first && !*first)
		*first = kept;
	return n + k;
}

static inline int t_shm_maps(void)
{
	return t_shm_maps_of(0, NULL);
}

/*
 * Among this process's mappings of channels a connector made for a link
 * (kept by the link between connections), those whose acceptor has not
 * let go yet: its done word (docs/SHM.md, "Layout") is still 0.
 */
static inline int t_kept_channels_held(void)
{
	char line[512];
	unsigned long lo;
	FILE *f = fopen("/proc/self/maps", "r");
	int n = 0;

	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, "/memfd:freeflow-shm") && sscanf(line, "%lx-", &lo) == 1)
			n += !__atomic_load_n((uint32_t *)(lo + FF_SHM_OFF_DONE_OF(FF_SHM_ACCEPTOR)), __ATOMIC_ACQUIRE);
	if (f)
		fclose(f);
	return n;
}

/* The first shm mapping of this process: both ends of a pair map the same memory. */
static inline uint8_t *t_shm_base(void)
{
	uint8_t *m;

	t_shm_maps_of(0, &m);
	return m;
}

/* The overlay name (peer or local) the program sees at fd, as hex into out (2 * 128 + 1 bytes). */
static inline void t_name_hex(int fd, int peer, char *out)
{
	struct sockaddr_storage ss;
	socklen_t l = sizeof(ss);

	if ((peer ? getpeername : getsockname)(fd, (void *)&ss, &l))
		l = 0;
	t_hex(out, (const uint8_t *)&ss, l);
}

/*
 * Whether the socket really at fd is a channel the agent handed over, not
 * the overlay TCP socket: the kernel's family is the channel's and the
 * kernel's own name of the socket differs from the one the program sees
 * (for host-tcp both are AF_INET, but the channel's port is another). On
 * the shm channel the socket is the bell, and the rings must be mapped.
 */
static inline int t_swapped(int fd)
{
	struct sockaddr_storage k, a;
	socklen_t kl = sizeof(k), al = sizeof(a);

	if (t_real_domain(fd) != t_channel_domain())
		return 0;
	if (t_raw(SYS_getsockname, fd, &k, &kl) || getsockname(fd, (void *)&a, &al))
		return 0;
	if (fa_shm() && t_shm_maps() <= 0)
		return 0;
	return kl != al || memcmp(&k, &a, kl) != 0;
}

/*
 * Whether the shm connection at fd was moved down to a kernel channel: the
 * socket really there is an AF_UNIX socket other than the bell socket that
 * was there (inode bell; 0 when unknown), and the program still sees the
 * overlay names.
 */
static inline int t_moved_down(int fd, ino_t bell)
{
	struct sockaddr_storage a;
	socklen_t al = sizeof(a);
	struct stat st;

	return t_real_domain(fd) == AF_UNIX && fstat(fd, &st) == 0 && st.st_ino != bell &&
	       getpeername(fd, (void *)&a, &al) == 0 &&
	       (a.ss_family == AF_INET || a.ss_family == AF_INET6);
}

/* The inode of the socket at fd (the bell socket, on an shm connection). */
static inline ino_t t_ino(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

/* The real value of an int socket option at fd, past the shim (-12345 on error). */
static inline int t_real_sockopt(int fd, int level, int name)
{
	int v = -12345;
	socklen_t l = sizeof(v);

	if (t_raw(SYS_getsockopt, fd, level, name, &v, &l))
		return -12345;
	return v;
}

/* Open fds of this process, from /proc/self/fd (minus the one reading it). */
/* fd's IPv4 port (peer: its peer's), as the application sees it; 0 if none. */
static inline uint16_t t_port_of(int fd, int peer)
{
	struct sockaddr_in a;
	socklen_t l = sizeof(a);

	if (peer ? getpeername(fd, (void *)&a, &l) : getsockname(fd, (void *)&a, &l))
		return 0;
	return ntohs(a.sin_port);
}

#define T_TCP_TIME_WAIT	0x06	/* the state number /proc/net/tcp shows */

/* The state of the IPv4 TCP socket with these local and remote ports (/proc/net/tcp), or -1 if none. */
static inline int t_tcp_state(uint16_t lport, uint16_t rport)
{
	FILE *f = fopen("/proc/net/tcp", "r");
	char line[512];
	int state = -1;

	while (f && fgets(line, sizeof(line), f)) {
		unsigned la, lp, ra, rp, st;

		if (sscanf(line, " %*d: %x:%x %x:%x %x", &la, &lp, &ra, &rp, &st) == 5 &&
		    lp == lport && rp == rport)
			state = (int)st;
	}
	if (f)
		fclose(f);
	return state;
}

/*
 * Open fds of this process, but its ledger's: the library makes that at the
 * first answer or link and keeps it for the process's life (ledger.c).
 */
/*
 * Whether fd is a session with the agent, or one being opened (an AF_UNIX
 * SOCK_SEQPACKET socket not connected yet): the parking thread of a process
 * with shm connections opens one some moment after the first (shm/park.c).
 */
static inline int t_agent_session(int fd)
{
	const char *path = getenv("FREEFLOW_AGENT_SOCKET");
	struct sockaddr_un sa;
	socklen_t len = sizeof(sa);
	int type = 0;
	socklen_t tl = sizeof(type);

	if (getpeername(fd, (struct sockaddr *)&sa, &len))
		return errno == ENOTCONN && !getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) &&
		       type == SOCK_SEQPACKET && t_real_domain(fd) == AF_UNIX;
	return path && sa.sun_family == AF_UNIX && len > offsetof(struct sockaddr_un, sun_path) &&
	       !strcmp(sa.sun_path, path);
}

/* The fds this process holds, but its ledger and its sessions with the agent. */
static inline int t_count_fds(void)
{
	static const char ledger[] = "/memfd:freeflow-ledger (deleted)";
	char p[64], to[sizeof(ledger) + 1];
	int n = 0;
	ssize_t l;

	for (int fd = 0; fd < 1024; fd++) {
		snprintf(p, sizeof(p), "/proc/self/fd/%d", fd);
		l = readlink(p, to, sizeof(to));
		n += l >= 0 && !(l == (ssize_t)sizeof(ledger) - 1 && !memcmp(to, ledger, (size_t)l)) &&
		     !t_agent_session(fd);
	}
	return n;
}

static inline socklen_t t_addr(int family, struct sockaddr_storage *ss, uint16_t port)
{
	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET6) {
		struct sockaddr_in6 *a = (void *)ss;

		a->sin6_family = AF_INET6;
		a->sin6_addr = in6addr_loopback;
		a->sin6_port = htons(port);
		return sizeof(*a);
	} else {
		struct sockaddr_in *a = (void *)ss;

		a->sin_family = AF_INET;
		a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		a->sin_port = htons(port);
		return sizeof(*a);
	}
}

/* A listener on loopback at port want (0: any free port); *port gets its port. */
static inline int t_listen_at(int family, uint16_t want, uint16_t *port)
{
	struct sockaddr_storage ss;
	socklen_t len = t_addr(family, &ss, want);
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, (void *)&ss, len) || listen(fd, 16)) {
		perror("listen");
		exit(T_EXIT_FAIL);
	}
	len = sizeof(ss);
	getsockname(fd, (void *)&ss, &len);
	*port = ntohs(family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
					 : ((struct sockaddr_in *)&ss)->sin_port);
	return fd;
}

/* A listener on loopback, any free port. */
static inline int t_listen(int family, uint16_t *port)
{
	return t_listen_at(family, 0, port);
}

/*
 * The links this process holds (docs/PROTOCOL.md, "Links"), up to max into
 * fds; returns how many. A link is an AF_UNIX SOCK_SEQPACKET socket whose
 * peer has no name: the agent session, the other such socket, is connected
 * to the agent's path.
 */
static inline int t_link_fds(int *fds, int max)
{
	int n = 0;

	for (int fd = 0; fd < 1024 && n < max; fd++) {
		struct sockaddr_un peer;
		socklen_t pl = sizeof(peer);

		if (t_real_domain(fd) == AF_UNIX &&
		    t_real_sockopt(fd, SOL_SOCKET, SO_TYPE) == SOCK_SEQPACKET &&
		    !t_raw(SYS_getpeername, fd, &peer, &pl) && pl == sizeof(sa_family_t))
			fds[n++] = fd;
	}
	return n;
}

/* Connection i to port (IPv4): even ones connect blocking, odd ones non-blocking, waited for with poll; the fd is returned blocking. */
static inline int t_connect_nth(uint16_t port, int i)
{
	struct sockaddr_storage ss;
	socklen_t len = t_addr(AF_INET, &ss, port);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (i % 2 ? SOCK_NONBLOCK : 0), 0);
	struct pollfd p = { .fd = fd, .events = POLLOUT };
	int err = 0;
	socklen_t el = sizeof(err);

	if (!connect(fd, (void *)&ss, len))
		return fd;
	CHECK(i % 2 && errno == EINPROGRESS, "connect %d: %s", i, strerror(errno));
	CHECK(poll(&p, 1, 5000) == 1, "connect %d never completed", i);
	CHECK(!getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) && !err, "connect %d: %s", i,
	      strerror(err));
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	return fd;
}

static inline int t_connect(int family, uint16_t port)
{
	struct sockaddr_storage ss;
	socklen_t len = t_addr(family, &ss, port);
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || connect(fd, (void *)&ss, len)) {
		perror("connect");
		exit(T_EXIT_FAIL);
	}
	return fd;
}

/* The byte at offset i of a test stream: not periodic in any small power of two. */
static inline uint8_t t_byte(uint64_t i, uint8_t seed)
{
	return (uint8_t)((i * 2654435761u) >> 13) ^ seed;
}

/*
 * How the stream helpers move a piece of the stream: like write(2) or
 * read(2) on fd, or another way with the caller's ctx. It may move fewer
 * than n bytes; <= 0 is a failure.
 */
typedef ssize_t (*t_io_fn)(int fd, void *buf, size_t n, void *ctx);

static inline ssize_t t_io_write(int fd, void *buf, size_t n, void *ctx)
{
	(void)ctx;
	return write(fd, buf, n);
}

static inline ssize_t t_io_read(int fd, void *buf, size_t n, void *ctx)
{
	(void)ctx;
	return read(fd, buf, n);
}

/* Bytes [off, n) of the test stream seed, handed to put; returns 0 once all were taken. */
static inline int t_put_stream(int fd, size_t off, size_t n, uint8_t seed, t_io_fn put, void *ctx)
{
	uint8_t buf[16384];

	while (off < n) {
		size_t k = n - off < sizeof(buf) ? n - off : sizeof(buf);
		ssize_t w;

		for (size_t i = 0; i < k; i++)
			buf[i] = t_byte(off + i, seed);
		w = put(fd, buf, k, ctx);
		if (w <= 0)
			return -1;
		off += (size_t)w;
	}
	return 0;
}

/* Bytes [off, n) of the test stream seed, got with get and each checked; 0 if all arrived intact. */
static inline int t_get_stream(int fd, size_t off, size_t n, uint8_t seed, t_io_fn get, void *ctx)
{
	uint8_t buf[16384];

	while (off < n) {
		size_t k = n - off < sizeof(buf) ? n - off : sizeof(buf);
		ssize_t r = get(fd, buf, k, ctx);

		if (r <= 0)
			return -1;
		for (ssize_t i = 0; i < r; i++)
			if (buf[i] != t_byte(off + (size_t)i, seed))
				return -2;
		off += (size_t)r;
	}
	return 0;
}

/* Bytes [off, n) of the test stream seed; returns 0 once all were written. */
static inline int t_send_stream_from(int fd, size_t off, size_t n, uint8_t seed)
{
	return t_put_stream(fd, off, n, seed, t_io_write, NULL);
}

static inline int t_send_stream(int fd, size_t n, uint8_t seed)
{
	return t_send_stream_from(fd, 0, n, seed);
}

/* Read bytes [off, n) of the test stream seed and check each; 0 if all arrived intact. */
static inline int t_recv_stream_from(int fd, size_t off, size_t n, uint8_t seed)
{
	return t_get_stream(fd, off, n, seed, t_io_read, NULL);
}

/* Read exactly n bytes and check each; returns 0 if all arrived intact. */
static inline int t_recv_stream(int fd, size_t n, uint8_t seed)
{
	return t_recv_stream_from(fd, 0, n, seed);
}

/* A pair in this process, one direction after the other: n bytes of stream seed, then of seed + 1 back. */
static inline void t_both_ways(int cfd, int sfd, size_t n, uint8_t seed, const char *what)
{
	CHECK(t_send_stream(cfd, n, seed) == 0 && t_recv_stream(sfd, n, seed) == 0,
	      "%s: bytes one way", what);
	seed++;
	CHECK(t_send_stream(sfd, n, seed) == 0 && t_recv_stream(cfd, n, seed) == 0,
	      "%s: bytes the other way", what);
}

struct t_duplex_in {
	int fd;
	size_t from, n;
	uint8_t seed;
	int r;
};

static inline void *t_duplex_reader(void *p)
{
	struct t_duplex_in *in = p;

	in->r = t_recv_stream_from(in->fd, in->from, in->n, in->seed);
	return NULL;
}

/*
 * Both directions of a stream at once, so that neither end waits for the
 * other to read: bytes [sent, n) of stream out are written while bytes
 * [got, n) of stream in are read and checked. 0 if all went through intact.
 */
static inline int t_duplex(int fd, size_t sent, uint8_t out, size_t got, uint8_t in, size_t n)
{
	struct t_duplex_in rd = { .fd = fd, .from = got, .n = n, .seed = in };
	pthread_t th;
	int w;

	if (pthread_create(&th, NULL, t_duplex_reader, &rd))
		return -1;
	w = t_send_stream_from(fd, sent, n, out);
	pthread_join(th, NULL);
	return w ? w : rd.r;
}

/*
 * Connection i of a test's sequence, both ways, n bytes each: the client
 * sends stream i and reads stream 100 + i, the server the other way round.
 */
static inline void t_exchange_nth(int fd, int i, size_t n, int client)
{
	const char *who = client ? "client" : "server";

	if (!client)
		CHECK(t_recv_stream(fd, n, (uint8_t)i) == 0,
		      "connection %d: server receive: data lost or corrupted", i);
	CHECK(t_send_stream(fd, n, (uint8_t)(client ? i : 100 + i)) == 0, "connection %d: %s send",
	      i, who);
	if (client)
		CHECK(t_recv_stream(fd, n, (uint8_t)(100 + i)) == 0,
		      "connection %d: client receive: data lost or corrupted", i);
}

/*
 * fork() with a stream socket pair between parent and child: each gets
 * its own end in *ctl (the other closed), and the pid as fork returns it.
 */
static inline pid_t t_fork_ctl(int *ctl)
{
	int sp[2];
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) || (pid = fork()) < 0) {
		perror("socketpair and fork");
		exit(T_EXIT_FAIL);
	}
	close(sp[pid == 0 ? 0 : 1]);
	*ctl = sp[pid == 0 ? 1 : 0];
	return pid;
}

/*
 * The start of a link test: the fake agent brokers channels whose rings
 * (1 MiB, unless FF_TEST_SHM_RING says otherwise) have room past
 * FF_SHM_KEEP; this process listens on *lfd and a child runs client(port,
 * its ctl end) and exits with its result. The child's pid.
 */
static inline pid_t t_link_test_start(char **argv, int (*client)(uint16_t port, int ctl), int *lfd, int *ctl)
{
	uint16_t port;
	pid_t pid;

	setenv("FF_TEST_SHM_RING", "1048576", 0);	/* read by the fake agent */
	t_shim_setup(argv, FA_BROKER);
	*lfd = t_listen(AF_INET, &port);
	pid = t_fork_ctl(ctl);
	if (pid == 0)
		_exit(client(port, *ctl));
	return pid;
}

/* Wait for a forked child; CHECKs it exited 0. */
static inline void t_wait_child(pid_t pid, const char *what)
{
	int status = 0;

	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s exited with status %#x",
	      what, status);
}

/*
 * t_ledger_entries(path, reason) once it reaches want, or what it is after
 * 5 s; read every 50 ms (each read goes through every ledger's pages).
 */
static inline int t_ledger_entries_await(int path, const char *reason, int want)
{
	int64_t end = t_ms() + 5000;
	int n;

	while ((n = t_ledger_entries(path, reason)) < want && t_ms() < end)
		usleep(50000);
	return n;
}

/*
 * Fork a child that exits at once, and wait for it: every shm connection
 * of this process moves down to a socket pair at the fork (docs/SHM.md).
 */
static inline void t_fork_child_exits(void)
{
	int st = -1;
	pid_t kid = fork();

	if (kid == 0)
		_exit(0);
	CHECK(kid > 0 && waitpid(kid, &st, 0) == kid && WIFEXITED(st), "the fork child: %s", strerror(errno));
}

/* A thread asleep on fd in poll() (use_select 0) or select(), 10 s at most (t_sleep_in_wait). */
struct t_sleeper {
	int fd, use_select;
	_Atomic int woke;	/* 0 asleep; 1 it reported fd readable; -1 it returned otherwise */
};

static inline void *t_sleep_in_wait(void *arg)
{
	struct t_sleeper *s = arg;
	int ok;

	if (s->use_select) {
		fd_set r;

		FD_ZERO(&r);
		FD_SET(s->fd, &r);
		ok = select(s->fd + 1, &r, NULL, NULL, &(struct timeval){ .tv_sec = 10 }) == 1 && FD_ISSET(s->fd, &r);
	} else {
		struct pollfd p = { s->fd, POLLIN, 0 };

		ok = poll(&p, 1, 10000) == 1 && (p.revents & POLLIN);
	}
	atomic_store(&s->woke, ok ? 1 : -1);
	return NULL;
}

/* Until the sleepers' connections are parked on TCP (the fake agent's FF_TEST_PARK_MS), 5 s at most. */
static inline void t_await_parked(const struct t_sleeper *s, int n)
{
	int64_t end = t_ms() + 5000;
	int parked = 0;

	while (!parked && t_ms() < end) {
		parked = 1;
		for (int i = 0; i < n; i++)
			parked &= t_real_domain(s[i].fd) == AF_INET;
		if (!parked)
			usleep(1000);
	}
	CHECK(parked, "not parked in 5 s");
}

/*
 * In a server, its side of t_wake_sleepers: on each of its n connections
 * fd[i], once the connector says go on ctl, n bytes of stream 5 + i, and
 * the connection open until it says done.
 */
static inline void t_stream_on_go(int ctl, const int *fd, int n, size_t bytes)
{
	char go;

	for (int i = 0; i < n; i++) {
		CHECK(read(ctl, &go, 1) == 1, "the connector's go %d", i);
		CHECK(t_send_stream(fd[i], bytes, (uint8_t)(5 + i)) == 0, "the acceptor's bytes, %d", i);
		/* Open until the connector has them: its wake-up must come from the bytes, not an EOF. */
		CHECK(read(ctl, &go, 1) == 1, "the connector's done %d", i);
		close(fd[i]);
	}
}

/*
 * The sleepers s[0..n) (threads t), asleep since before a move of their
 * connections: each reports nothing before its server writes
 * (t_stream_on_go), then the bytes within 2 s, and reads them intact.
 */
static inline void t_wake_sleepers(int ctl, struct t_sleeper *s, pthread_t *t, int n, size_t bytes)
{
	for (int i = 0; i < n; i++) {
		const char *what = s[i].use_select ? "select" : "poll";
		int64_t end;

		usleep(100000);
		CHECK(!atomic_load(&s[i].woke), "the %s returned before any byte came", what);
		CHECK(write(ctl, "g", 1) == 1, "go");
		for (end = t_ms() + 2000; t_ms() < end && !atomic_load(&s[i].woke);)
			usleep(1000);
		CHECK(atomic_load(&s[i].woke) == 1, "the %s asleep across the move did not report the bytes within 2 s", what);
		pthread_join(t[i], NULL);
		CHECK(t_recv_stream(s[i].fd, bytes, (uint8_t)(5 + i)) == 0, "the acceptor's bytes after the move, %d", i);
		CHECK(write(ctl, "d", 1) == 1, "done");
		close(s[i].fd);
	}
}

/*
 * In a server t_fork_server runs: listen, write the port on ctl, accept
 * one connection, which must be swapped. *lfd is the listener.
 */
static inline int t_serve_one(int ctl, int *lfd)
{
	uint16_t port;
	int fd;

	*lfd = t_listen(AF_INET, &port);
	CHECK(write(ctl, &port, sizeof(port)) == sizeof(port), "the listener's port");
	fd = accept(*lfd, NULL, NULL);
	CHECK(fd >= 0 && t_swapped(fd), "the accepted connection is not swapped");
	return fd;
}

/* In a server t_fork_server runs: t_serve_one, then a second connection, also swapped, in fd[0..2). */
static inline void t_serve_two(int ctl, int *lfd, int *fd)
{
	fd[0] = t_serve_one(ctl, lfd);
	fd[1] = accept(*lfd, NULL, NULL);
	CHECK(fd[1] >= 0 && t_swapped(fd[1]), "the second connection is on shm");
}

/*
 * Fork server(ctl), which listens and writes its port on ctl (*ctl is this
 * end); *pid is the child. Returns the port.
 */
static inline uint16_t t_fork_server(int (*server)(int ctl), int *ctl, pid_t *pid)
{
	uint16_t port = 0;

	*pid = t_fork_ctl(ctl);
	if (*pid == 0)
		_exit(server(*ctl));
	CHECK(read(*ctl, &port, sizeof(port)) == sizeof(port), "the server's listener");
	return port;
}

/* Fork server(ctl) as t_fork_server does and connect to it: the connection, which must be swapped. */
static inline int t_connect_forked(int (*server)(int ctl), int *ctl, pid_t *pid)
{
	int fd = t_connect(AF_INET, t_fork_server(server, ctl, pid));

	CHECK(t_swapped(fd), "the connection to the forked server is not swapped");
	return fd;
}

/*
 * Listen here and fork client(go, port), which holds no copy of the
 * listener (so closing it here ends it) and talks over go with this
 * process (*go is this end); *pid is the child. Returns the listener.
 */
static inline int t_listen_fork(int (*client)(int go, uint16_t port), int *go, pid_t *pid)
{
	uint16_t port;
	int lfd = t_listen(AF_INET, &port);

	*pid = t_fork_ctl(go);
	if (*pid == 0) {
		close(lfd);
		_exit(client(*go, port));
	}
	return lfd;
}

/*
 * The client of a paced sequence: connection i is made once the server
 * writes a byte on go, must be swapped, and carries t_exchange_nth's
 * streams. Returns the exit code.
 */
static inline int t_paced_client(int go, uint16_t port, int conns, size_t n)
{
	for (int i = 0; i < conns; i++) {
		char c;
		int fd;

		CHECK(read(go, &c, 1) == 1, "the server never said go for connection %d", i);
		fd = t_connect(AF_INET, port);
		CHECK(t_swapped(fd), "connection %d not swapped", i);
		t_exchange_nth(fd, i, n, 1);
		close(fd);
	}
	return t_exit_code();
}

/* The server's side of t_paced_client's connection i: go, accept, swapped, streams intact. */
static inline void t_paced_accept(int lfd, int go, int i, size_t n)
{
	int fd;

	CHECK(write(go, "g", 1) == 1, "go %d", i);
	fd = accept(lfd, NULL, NULL);
	CHECK(fd >= 0 && t_swapped(fd), "connection %d not accepted and swapped", i);
	t_exchange_nth(fd, i, n, 0);
	close(fd);
}

/* Handle sig with fn and flags (SA_RESTART or not), nothing masked meanwhile. */
static inline void t_sigaction(int sig, void (*fn)(int), int flags)
{
	struct sigaction sa = { .sa_handler = fn, .sa_flags = flags };

	sigemptyset(&sa.sa_mask);
	CHECK(!sigaction(sig, &sa, NULL), "sigaction %d: %s", sig, strerror(errno));
}

/* A handler for a signal that must never come (it could not have interrupted the test's wait). */
static inline void t_never(int sig)
{
	(void)sig;
	_exit(T_EXIT_FAIL);
}

/* Signals t_catch took; with t_catch_go >= 0, each also lets the paced client connect (write is signal-safe). */
static volatile sig_atomic_t t_caught;
static int t_catch_go = -1;

static inline void t_catch(int sig)
{
	(void)sig;
	t_caught++;
	if (t_catch_go >= 0 && write(t_catch_go, "g", 1) != 1)
		_exit(T_EXIT_FAIL);
}

/* SIGALRM in 50 ms, caught by t_catch installed with flags; go >= 0: it lets the paced client connect. */
static inline void t_alarm_soon(int flags, int go)
{
	struct itimerval it = { .it_value = { .tv_usec = 50000 } };

	t_catch_go = go;
	t_sigaction(SIGALRM, t_catch, flags);
	CHECK(!setitimer(ITIMER_REAL, &it, NULL), "setitimer: %s", strerror(errno));
}

/*
 * liburing (Debian liburing2) loaded as a program linked with it would
 * have it, its calls bound to the first definition, the preload's: its
 * ring set-up and tear-down into *init and *fini; exits with a skip if it
 * is not installed.
 */
static inline void t_liburing(int (**init)(unsigned, void *, unsigned), void (**fini)(void *))
{
	if (!dlopen("liburing.so.2", RTLD_NOW | RTLD_GLOBAL)) {
		printf("liburing.so.2 not installed (Debian liburing2)\n");
		exit(T_EXIT_SKIP);
	}
	*init = (int (*)(unsigned, void *, unsigned))dlsym(RTLD_DEFAULT, "io_uring_queue_init");
	*fini = (void (*)(void *))dlsym(RTLD_DEFAULT, "io_uring_queue_exit");
}

/*
 * Listen, fork client(port) and serve its conns connections in turn: each
 * must be swapped and carry t_exchange_nth's streams of n bytes; then the
 * client must exit 0.
 */
/* A listener here, with client(its port) run in a forked child (*pid): the listener. */
static inline int t_fork_client(int (*client)(uint16_t port), pid_t *pid)
{
	uint16_t port;
	int lfd = t_listen(AF_INET, &port);

	*pid = fork();
	if (*pid == 0)
		_exit(client(port));
	return lfd;
}

/* The server's side of t_serve_sequence on lfd: conns connections, each swapped and exchanged. */
static inline void t_serve_accepts(int lfd, int conns, size_t n)
{
	for (int i = 0; i < conns; i++) {
		int fd = accept(lfd, NULL, NULL);

		CHECK(fd >= 0, "accept %d: %s", i, strerror(errno));
		CHECK(t_swapped(fd), "server connection %d not swapped", i);
		t_exchange_nth(fd, i, n, 0);
		close(fd);
	}
}

static inline void t_serve_sequence(int (*client)(uint16_t port), int conns, size_t n)
{
	pid_t pid;
	int lfd = t_fork_client(client, &pid);

	t_serve_accepts(lfd, conns, n);
	t_wait_child(pid, "client");
	close(lfd);
}

/*
 * main() of a test whose cases connect from here to a loopback listener
 * that a forked process serves: server(lfd) returns its failures as its
 * exit status, and after the cases the agent must have logged swaps swaps.
 */
static inline int t_run_served(char **argv, int (*server)(int lfd),
			       void (*cases)(uint16_t port), int swaps)
{
	uint16_t port;
	int lfd;
	pid_t pid;

	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen(AF_INET, &port);
	pid = fork();
	if (pid == 0)
		_exit(server(lfd));
	cases(port);
	t_wait_child(pid, "server (status = failures)");
	close(lfd);
	CHECK(t_fast_await(swaps) == swaps, "%d fast connections", t_fast_conns());
	return t_shim_finish();
}

/*
 * A listener on loopback (*lfd, *port) served by a forked process, whose
 * pid is returned: peer(lfd, ready) gives its exit status, and it writes to
 * ready to say how far it got; *ready gets the pipe's reading end.
 */
static inline pid_t t_fork_peer(int (*peer)(int lfd, int ready), int *lfd, uint16_t *port,
				int *ready)
{
	int p[2];
	pid_t pid;

	if (pipe(p)) {
		perror("pipe");
		exit(T_EXIT_FAIL);
	}
	*lfd = t_listen(AF_INET, port);
	pid = fork();
	if (pid == 0)
		_exit(peer(*lfd, p[1]));
	close(p[1]);
	*ready = p[0];
	return pid;
}

/*
 * The peer's start of a mid-stream test: accepts from lfd a connection
 * that must be swapped (else 2), writes bytes [0, sent0) of stream out and
 * says so on ready (else 3), then carries both streams on to total, reading
 * stream in from its start (else 4). 0 with the connection in *fd.
 */
static inline int t_mid_stream_peer(int lfd, int ready, size_t sent0, uint8_t out, uint8_t in,
				    size_t total, int *fd)
{
	*fd = accept(lfd, NULL, NULL);
	if (*fd < 0 || !t_swapped(*fd))
		return 2;
	if (t_send_stream_from(*fd, 0, sent0, out) || write(ready, "r", 1) != 1)
		return 3;
	return t_duplex(*fd, sent0, out, 0, in, total) ? 4 : 0;
}

/*
 * A connection from a forked process (*pid) that writes one byte and then
 * waits to be killed: our end, accepted from lfd (listening on port),
 * CHECKed swapped and with that byte read.
 */
static inline int t_accept_doomed(int lfd, uint16_t port, pid_t *pid)
{
	char c;
	int fd;

	*pid = fork();
	if (*pid == 0) {
		int fd2 = t_connect(AF_INET, port);

		if (write(fd2, "k", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	fd = accept(lfd, NULL, NULL);
	CHECK(t_swapped(fd), "not swapped");
	CHECK(read(fd, &c, 1) == 1, "first byte");
	return fd;
}

struct t_conn_arg {
	int family;
	uint16_t port;
	int fd;
};

static inline void *t_connect_thread(void *p)
{
	struct t_conn_arg *a = p;

	a->fd = t_connect(a->family, a->port);
	return NULL;
}

/*
 * A file of n bytes of the test stream seed, opened read-only at exactly
 * fd, a number just closed (the free numbers below it are taken
 * meanwhile, then given back); -1 if it got another number.
 */
static inline int t_file_at(int fd, size_t n, uint8_t seed)
{
	char p[PATH_MAX + 16];
	int w, f, fill[256], nfill = 0;

	t_path(p, sizeof(p), "file_at");
	w = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (w < 0 || t_put_stream(w, 0, n, seed, t_io_write, NULL) || close(w))
		return -1;
	while (nfill < 256 && (f = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0 && f < fd)
		fill[nfill++] = f;
	/* Past the shim: its close() would clear the slot the file must meet. */
	if (f >= 0 && f >= fd)
		t_raw(SYS_close, f);
	f = open(p, O_RDONLY | O_CLOEXEC);
	unlink(p);
	while (nfill--)
		close(fill[nfill]);
	if (f != fd) {
		close(f);
		return -1;
	}
	return f;
}

/*
 * sfd, one end of a pair the agent answered (cfd the other), was just
 * closed by some route: a 1 MiB file that gets its number reads back
 * intact, the agent hears CLOSED (closed_before: its count before), and
 * the peer reads the end of the stream.
 */
static inline void t_closed_then_file(const char *route, int sfd, int cfd, int closed_before)
{
	int f = t_file_at(sfd, 1 << 20, 0x5a);
	char c;

	CHECK(f == sfd, "%s: the file did not get the closed number %d", route, sfd);
	/* Before anything else closes that number: a close() would tell the agent itself. */
	CHECK(t_agent_await("closed", closed_before + 1) == closed_before + 1,
	      "%s: the agent was not told CLOSED (%d, want %d)", route, t_agent_count("closed"),
	      closed_before + 1);
	if (f == sfd) {
		int r = t_get_stream(f, 0, 1 << 20, 0x5a, t_io_read, NULL);

		CHECK(r == 0, "%s: the 1 MiB file on the closed connection's number read %s", route,
		      r == -1 ? "short (EOF or an error)" : "wrong bytes");
		close(f);
	}
	CHECK(recv(cfd, &c, 1, 0) == 0, "%s: the peer did not read the end of the stream: %s",
	      route, strerror(errno));
	close(cfd);
	t_agent_await("closed", closed_before + 2);	/* the peer's, before the next count */
}

/*
 * A connected pair in this process: a thread connects (blocking) while this
 * one accepts, so the agent sees both ends within its wait.
 */
static inline void t_pair(int family, int *cfd, int *sfd)
{
	struct t_conn_arg a = { .family = family };
	int lfd = t_listen(family, &a.port);
	pthread_t th;

	pthread_create(&th, NULL, t_connect_thread, &a);
	*sfd = accept(lfd, NULL, NULL);
	pthread_join(th, NULL);
	*cfd = a.fd;
	close(lfd);
	if (*sfd < 0 || *cfd < 0) {
		perror("t_pair");
		exit(T_EXIT_FAIL);
	}
}

/* A role (t_stderr_lines) that makes one pair and passes a byte: its exit code, 0 if the byte went through. */
static inline int t_pair_role(void)
{
	int cfd, sfd;
	char c;

	t_pair(AF_INET, &cfd, &sfd);
	return write(cfd, "a", 1) == 1 && read(sfd, &c, 1) == 1 ? 0 : 1;
}

/* Stage 1 (t_shim_setup), then a connected pair in this process, CHECKed swapped at both ends. */
static inline void t_setup_swapped_pair(char **argv, int *cfd, int *sfd)
{
	t_shim_setup(argv, FA_BROKER);
	t_pair(AF_INET, cfd, sfd);
	CHECK(t_swapped(*cfd) && t_swapped(*sfd), "the pair is not swapped");
}

/*
 * main() of a test whose cases each get a fresh pair on the shm channel
 * (cfd, sfd) and m, the start of its shared memory; a pair not on shm is a
 * failure, and its case is not run.
 */
static inline int t_run_shm_cases(char **argv, void (*const *cases)(int cfd, int sfd, uint8_t *m),
				  size_t n)
{
	t_shim_setup(argv, FA_BROKER);
	for (size_t i = 0; i < n; i++) {
		int cfd, sfd;
		uint8_t *m;

		t_pair(AF_INET, &cfd, &sfd);
		m = t_shm_base();
		CHECK(t_swapped(cfd) && m, "case %zu: not on shm", i);
		if (m)
			cases[i](cfd, sfd, m);
		close(cfd);
		close(sfd);
	}
	return t_shim_finish();
}

/*
 * Run this image again as "<self> role", preloaded as it is, with
 * FREEFLOW_DEBUG=debug and, unless sock is NULL, FREEFLOW_AGENT_SOCKET=sock.
 * Its stderr is echoed, prefixed, to ours; *lines gets how many lines it
 * wrote and *with how many of them contain word. Returns its exit code, or
 * -1 if it did not exit.
 */
static inline int t_role(const char *role, const char *debug, const char *sock,
			 const char *word, int *lines, int *with)
{
	char path[PATH_MAX + 16], line[512];
	int status = 0;
	pid_t pid;
	FILE *f;

	t_path(path, sizeof(path), "stderr.txt");
	pid = fork();
	if (pid == 0) {
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		dup2(fd, 2);
		setenv("FREEFLOW_DEBUG", debug, 1);
		if (sock)
			setenv("FREEFLOW_AGENT_SOCKET", sock, 1);
		execl("/proc/self/exe", "self", role, (char *)NULL);
		_exit(127);
	}
	waitpid(pid, &status, 0);
	*lines = *with = 0;
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f)) {
		(*lines)++;
		*with += strstr(line, word) != NULL;
		fprintf(stderr, "%s role: %s", role, line);
	}
	if (f)
		fclose(f);
	unlink(path);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/*
 * Run this test's role with FREEFLOW_DEBUG=debug (t_role); returns the
 * lines it printed on stderr, or -1 if one lacks must_contain.
 */
static inline int t_stderr_lines(const char *role, const char *debug, const char *must_contain)
{
	int lines, with, code = t_role(role, debug, NULL, must_contain, &lines, &with);

	CHECK(code == 0, "%s role exited with %d", role, code);
	return with == lines ? lines : -1;
}

/*
 * A pair whose listener the shim never saw (listen() by the raw system
 * call): the fake agent does not know it, so only the connecting end asks
 * and is told overlay, listener-not-freeflow.
 */
static inline void t_unannounced_pair(int *cfd, int *sfd)
{
	struct sockaddr_storage ss;
	socklen_t len = t_addr(AF_INET, &ss, 0);
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (lfd < 0 || bind(lfd, (void *)&ss, len) || t_raw(SYS_listen, lfd, 4) ||
	    getsockname(lfd, (void *)&ss, &len)) {
		perror("unannounced listener");
		exit(T_EXIT_FAIL);
	}
	*cfd = t_connect(AF_INET, ntohs(((struct sockaddr_in *)&ss)->sin_port));
	*sfd = accept(lfd, NULL, NULL);
	close(lfd);
}

#endif
