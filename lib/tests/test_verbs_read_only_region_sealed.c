/* SPDX-License-Identifier: MIT */
/* Description: a region registered for remote reads only is shared read-only for good: its memfd is sealed F_SEAL_FUTURE_WRITE, so even a peer that reopens its descriptor through /proc for writing cannot map it writable, while the owner still writes its buffer; a writable region cannot share those pages (EINVAL), one elsewhere can */
#include <sys/mman.h>

#include "verbstest.h"

/* The provider's memfd of the region's pages: the newest "ffv-mr" descriptor. */
static int region_memfd(void)
{
	int found = -1;

	for (int fd = 0; fd < 1024; fd++) {
		char path[64], target[128];
		ssize_t n;

		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		n = readlink(path, target, sizeof(target) - 1);
		if (n > 0 && (target[n] = 0, strstr(target, "memfd:ffv-mr")))
			found = fd;
	}
	return found;
}

int main(int argc, char **argv)
{
	struct tv_end e;
	char *ro = aligned_alloc(4096, 8192), *rw = aligned_alloc(4096, 8192), path[64];
	struct ibv_mr *mro, *mrw;
	int fd, again;
	void *p;

	(void)argc;
	tv_setup(argv);
	tv_open(&e);
	memset(ro, 1, 8192);
	mro = ibv_reg_mr(e.pd, ro + 100, 5000, IBV_ACCESS_REMOTE_READ);
	TV_MUST(mro, "register a read-only region: %s", strerror(errno));
	fd = region_memfd();
	TV_MUST(fd >= 0, "no ffv-mr memfd after registering");
	CHECK(fcntl(fd, F_GET_SEALS) & F_SEAL_FUTURE_WRITE, "the read-only region's memfd is not sealed against writes");
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	again = open(path, O_RDWR | O_CLOEXEC);
	p = again < 0 ? MAP_FAILED : mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, again, 0);
	CHECK(p == MAP_FAILED && errno == EPERM, "the read-only region mapped writable through /proc: %s",
	      p == MAP_FAILED ? strerror(errno) : "it worked");
	ro[200] = 7;	/* the owner's own mapping stays writable */
	CHECK(ro[200] == 7 && ro[8000] == 1, "the owner's buffer");
	errno = 0;
	mrw = ibv_reg_mr(e.pd, ro + 4096, 100, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE);
	CHECK(!mrw && errno == EINVAL, "a writable region on read-only shared pages: %s", mrw ? "registered" : strerror(errno));
	mrw = ibv_reg_mr(e.pd, rw, 8192, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE);
	TV_MUST(mrw, "a writable region elsewhere: %s", strerror(errno));
	fd = region_memfd();
	CHECK(fd >= 0 && !(fcntl(fd, F_GET_SEALS) & F_SEAL_FUTURE_WRITE), "the writable region's memfd is sealed against writes");
	CHECK(ibv_dereg_mr(mrw) == 0 && ibv_dereg_mr(mro) == 0, "deregister");
	CHECK(ro[200] == 7 && ro[8000] == 1, "the owner's buffer after deregistering");
	return t_shim_finish();
}
