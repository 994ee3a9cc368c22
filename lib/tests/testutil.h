/* SPDX-License-Identifier: MIT */
/*
 * Shared by the tests: failure reporting that keeps going, so one run shows
 * every broken case, hex helpers for protocol bytes, and sending a message
 * with fds as the agent does.
 */
#ifndef FREEFLOW_TESTUTIL_H
#define FREEFLOW_TESTUTIL_H

#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define T_EXIT_PASS	0
#define T_EXIT_FAIL	1
#define T_EXIT_SKIP	77

static int t_failures;

#define CHECK(cond, ...) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "%s:%d: check failed: %s: ",		\
			__FILE__, __LINE__, #cond);			\
		fprintf(stderr, __VA_ARGS__);				\
		fputc('\n', stderr);					\
		t_failures++;						\
	}								\
} while (0)

static inline int t_exit_code(void)
{
	return t_failures ? T_EXIT_FAIL : T_EXIT_PASS;
}

static inline int t_hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* Lowercase hex only, as the vectors file writes it. Returns bytes or -1. */
static inline long t_unhex(const char *s, size_t n, uint8_t *out, size_t cap)
{
	if (n % 2 || n / 2 > cap)
		return -1;
	for (size_t i = 0; i < n; i += 2) {
		int hi = t_hexval(s[i]), lo = t_hexval(s[i + 1]);

		if (hi < 0 || lo < 0)
			return -1;
		out[i / 2] = (uint8_t)(hi << 4 | lo);
	}
	return (long)(n / 2);
}

/* Append the lowercase hex of buf to out (which must have room). */
static inline char *t_hex(char *out, const uint8_t *buf, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out += sprintf(out, "%02x", buf[i]);
	*out = '\0';
	return out;
}

/* Most fds one t_fds_msg carries. */
#define T_MAX_SEND_FDS	24

/* One message with fds (SCM_RIGHTS); mh points into the struct, so it must stay put. */
struct t_fds_msg {
	union {
		char b[CMSG_SPACE(T_MAX_SEND_FDS * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov;
	struct msghdr mh;
};

/* Fill m with n bytes from buf and nfd fds from fds; -1 (said on stderr) if nfd is too many. */
static inline int t_fds_msg(struct t_fds_msg *m, const void *buf, size_t n, const int *fds, int nfd)
{
	if (nfd > T_MAX_SEND_FDS) {
		fprintf(stderr, "t_fds_msg: %d fds, at most %d\n", nfd, T_MAX_SEND_FDS);
		return -1;
	}
	memset(m, 0, sizeof(*m));
	m->iov = (struct iovec){ .iov_base = (void *)buf, .iov_len = n };
	m->mh.msg_iov = &m->iov;
	m->mh.msg_iovlen = 1;
	if (nfd > 0) {
		struct cmsghdr *c;

		m->mh.msg_control = m->ctl.b;
		m->mh.msg_controllen = CMSG_SPACE((size_t)nfd * sizeof(int));
		c = CMSG_FIRSTHDR(&m->mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN((size_t)nfd * sizeof(int));
		memcpy(CMSG_DATA(c), fds, (size_t)nfd * sizeof(int));
	}
	return 0;
}

/*
 * One message of n bytes with nfd fds from fds (SCM_RIGHTS), as the agent
 * sends a reply; a send error is left to the receiving side's checks.
 */
static inline void t_send_fds(int fd, const void *buf, size_t n, const int *fds, int nfd)
{
	struct t_fds_msg m;

	if (t_fds_msg(&m, buf, n, fds, nfd) == 0)
		sendmsg(fd, &m.mh, MSG_NOSIGNAL);
}

/* The fd that came with a one-byte message on fd (SCM_RIGHTS, as t_send_fds sends it); -1 if none. */
static inline int t_recv_fd(int fd)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} ctl;
	char c;
	struct iovec v = { &c, 1 };
	struct msghdr mh = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = ctl.b,
			     .msg_controllen = sizeof(ctl.b) };
	struct cmsghdr *cm;
	int got = -1;

	if (recvmsg(fd, &mh, 0) != 1 || !(cm = CMSG_FIRSTHDR(&mh)) || cm->cmsg_level != SOL_SOCKET ||
	    cm->cmsg_type != SCM_RIGHTS || cm->cmsg_len != CMSG_LEN(sizeof(int)))
		return -1;
	memcpy(&got, CMSG_DATA(cm), sizeof(int));
	return got;
}

/*
 * The LD_PRELOAD list under which libc lacks what FF_TEST_HIDE names, for
 * the library (tests/hide_symbol.c): FF_TEST_PRELOAD_EXTRA (a sanitizer
 * first), hide_symbol.so next to this program, then FF_LIBRARY. Skips the
 * test if FF_LIBRARY names no library.
 */
static inline void t_preload_hiding(char *pre, size_t cap)
{
	const char *lib = getenv("FF_LIBRARY"), *extra = getenv("FF_TEST_PRELOAD_EXTRA");
	char abs[PATH_MAX], self[PATH_MAX] = "";

	if (!lib || !realpath(lib, abs) || readlink("/proc/self/exe", self, sizeof(self) - 1) < 0) {
		printf("FF_LIBRARY must name the built libfreeflow.so\n");
		exit(T_EXIT_SKIP);
	}
	self[sizeof(self) - 1] = '\0';
	snprintf(pre, cap, "%s%s%s/hide_symbol.so %s", extra ? extra : "",
		 extra && *extra ? " " : "", dirname(self), abs);
}

/*
 * Before t_shim_setup: the test runs with hide_symbol.so preloaded before
 * the library too (hiding nothing), which counts the library's recv()
 * calls per fd; t_lib_recvs() gives the counters in the preloaded run.
 */
static inline void t_preload_spy(void)
{
	const char *extra = getenv("FF_TEST_PRELOAD_EXTRA");
	char self[PATH_MAX] = "", pre[2 * PATH_MAX + 32];

	if (getenv("FF_TEST_DIR") || readlink("/proc/self/exe", self, sizeof(self) - 1) < 0)
		return;		/* the preloaded run, or no way to find the spy: t_lib_recvs says so */
	self[sizeof(self) - 1] = '\0';
	snprintf(pre, sizeof(pre), "%s%s%s/hide_symbol.so", extra ? extra : "",
		 extra && *extra ? " " : "", dirname(self));
	setenv("FF_TEST_PRELOAD_EXTRA", pre, 1);
}

static inline _Atomic unsigned *t_lib_recvs(void)
{
	return dlsym(RTLD_DEFAULT, "ff_test_lib_recvs");
}

/* The integer in sysctl file path, if it is below max; else (or unreadable) max. */
static inline unsigned int t_sysctl_at_most(const char *path, unsigned int max)
{
	FILE *f = fopen(path, "r");
	long long v = -1;

	if (f) {
		if (fscanf(f, "%lld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v > 0 && v < (long long)max ? (unsigned int)v : max;
}

#endif
