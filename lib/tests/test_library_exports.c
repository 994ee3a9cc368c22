/* SPDX-License-Identifier: MIT */
/* Description: libfreeflow.so loads with every symbol resolved and exports exactly the libc functions it wraps, nothing an application could call by accident */
#include <dlfcn.h>
#include <stdlib.h>

#include "testutil.h"

/* Keep in step with libfreeflow.map. */
static const char *const wrapped[] = {
	"socket", "connect", "listen", "accept", "accept4", "close",
	"dup", "dup2", "dup3", "fcntl", "fcntl64", "shutdown", "ioctl",
	"getsockname", "getpeername", "getsockopt", "setsockopt",
	"read", "write", "readv", "writev", "recv", "send", "recvfrom", "sendto",
	"recvmsg", "sendmsg", "sendfile", "sendfile64",
	"__read_chk", "__recv_chk", "__recvfrom_chk",
	"poll", "select", "epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait",
	"ppoll", "pselect", "epoll_pwait2", "__poll_chk", "__ppoll_chk",
	"recvmmsg", "sendmmsg", "splice",
	"execve", "execv", "execvp", "execvpe", "execl", "execlp", "execle", "fexecve",
	"posix_spawn", "posix_spawnp", "vfork",
	"syscall", "close_range", "closefrom", "fdopen", "fclose", "preadv2", "pwritev2",
	"preadv64v2", "pwritev64v2", "_Fork", "system", "popen", "freopen", "freopen64",
	"io_uring_setup", "io_uring_queue_init", "io_uring_queue_init_params",
	"io_uring_queue_init_mem",
	"open", "open64", "openat", "openat64",
};
#define NWRAPPED (sizeof(wrapped) / sizeof(wrapped[0]))

static int is_wrapped(const char *name)
{
	for (size_t i = 0; i < NWRAPPED; i++)
		if (!strcmp(name, wrapped[i]))
			return 1;
	return 0;
}

/*
 * Defined dynamic symbols other than the version node: count the unexpected
 * ones and how many of the wrapped ones appear. Returns -1 when nm cannot be
 * run (then the test skips: binutils is optional).
 */
static int check_exports(const char *lib, int *found)
{
	char cmd[512], line[256], name[200];
	FILE *p;
	int bad = 0;

	snprintf(cmd, sizeof(cmd), "nm -D --defined-only '%s' 2>/dev/null", lib);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	*found = 0;
	while (fgets(line, sizeof(line), p)) {
		char *at;

		if (strstr(line, " A FREEFLOW_") || sscanf(line, "%*s %*s %199s", name) != 1)
			continue;
		if ((at = strchr(name, '@')))
			*at = '\0';
		if (is_wrapped(name)) {
			(*found)++;
			continue;
		}
		fprintf(stderr, "exported: %s", line);
		bad++;
	}
	return pclose(p) == 0 ? bad : -1;
}

int main(int argc, char **argv)
{
	const char *lib = argc > 1 ? argv[1] : getenv("FF_LIBRARY");
	int bad, found = 0;
	void *h;

	if (!lib) {
		fprintf(stderr, "give the library as argument or in FF_LIBRARY\n");
		return T_EXIT_FAIL;
	}
	h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	CHECK(h, "dlopen: %s", dlerror());
	if (h) {
		CHECK(!dlsym(h, "ff_msg_decode") && !dlsym(h, "ff_agent_hello") &&
		      !dlsym(h, "ff_fd_slot") && !dlsym(h, "ff_negotiate"),
		      "internal functions are visible");
		CHECK(dlsym(h, "connect") && dlsym(h, "epoll_ctl"), "wrappers are not visible");
		dlclose(h);
	}
	bad = check_exports(lib, &found);
	if (bad < 0) {
		printf("nm is not available to list the exports\n");
		return t_failures ? T_EXIT_FAIL : T_EXIT_SKIP;
	}
	CHECK(bad == 0, "%d unexpected symbols exported", bad);
	CHECK(found == (int)NWRAPPED, "%d of %zu wrapped functions exported", found, NWRAPPED);
	return t_exit_code();
}
