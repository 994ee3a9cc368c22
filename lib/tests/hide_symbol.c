/* SPDX-License-Identifier: MIT */
/*
 * Preloaded before libfreeflow.so by test_missing_libc_symbol_aborts: the
 * library's dlsym(RTLD_NEXT, name) answers NULL for the libc function
 * FF_TEST_HIDE names, as a libc without it would, and libc's own function
 * for every other name; everyone else's lookups are left as they were.
 * The library's recv() (with which it reads bell sockets) is libc's,
 * counted per fd in ff_test_lib_recvs, which a test finds by dlsym
 * (test_shm_epoll_wakeup_reads_no_idle_bell, through t_preload_spy).
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define COUNTED_FDS	1024

__attribute__((visibility("default"))) _Atomic unsigned ff_test_lib_recvs[COUNTED_FDS];
static ssize_t (*libc_recv)(int, void *, size_t, int);

static ssize_t counted_recv(int fd, void *buf, size_t n, int flags)
{
	if (fd >= 0 && fd < COUNTED_FDS)
		ff_test_lib_recvs[fd]++;
	return libc_recv(fd, buf, n, flags);
}

typedef void *(*dlsym_fn)(void *, const char *);

static dlsym_fn real_dlsym(void)
{
	static const char *const versions[] = { "GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17" };
	static dlsym_fn fn;

	for (size_t i = 0; !fn && i < sizeof(versions) / sizeof(versions[0]); i++)
		fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
	return fn;
}

__attribute__((visibility("default"))) void *dlsym(void *handle, const char *name)
{
	const char *hide = getenv("FF_TEST_HIDE");
	Dl_info caller;

	if (handle == RTLD_NEXT && dladdr(__builtin_return_address(0), &caller) &&
	    caller.dli_fname && strstr(caller.dli_fname, "libfreeflow")) {
		if (hide && !strcmp(name, hide))
			return NULL;
		handle = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
		if (!strcmp(name, "recv")) {
			libc_recv = real_dlsym()(handle, name);
			return libc_recv ? (void *)counted_recv : NULL;
		}
	}
	return real_dlsym()(handle, name);
}
