/* SPDX-License-Identifier: MIT */
/*
 * Protection domains, memory regions and the peers' regions mapped here
 * (docs/VERBS.md, "Same-host data path"). A region that allows remote
 * access becomes shared memory in place: its pages are copied into a memfd
 * mapped over them at the same address, then registered with the agent, who
 * hands it to the QPs connected to this PD. Regions without remote access
 * stay as they are and are known here only.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include "freeflow/proto.h"
#include "verbs/verbs.h"

#define PAGE		4096u
#define MAX_SEGS	16	/* SEGMENTS' limit (PROTOCOL.md); struct ffv_mr's segs */
#define REMOTE_ACCESS	(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)
#define WRITABLE	(IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)

static uintptr_t floor_page(uintptr_t a) { return a & ~(uintptr_t)(PAGE - 1); }
static uintptr_t ceil_page(uintptr_t a) { return (a + PAGE - 1) & ~(uintptr_t)(PAGE - 1); }

struct ibv_pd *ffv_alloc_pd(struct ibv_context *ctx)
{
	struct ffv_context *c = ffv_ctx(ctx);
	struct ffv_pd *pd = calloc(1, sizeof(*pd));

	if (!pd)
		return NULL;
	ffv_lock(c);
	pd->num = ++c->next_pd;
	pthread_mutex_unlock(&c->mu);
	return &pd->ibv_pd;
}

int ffv_dealloc_pd(struct ibv_pd *pd)
{
	free(ffv_pd(pd));
	return 0;
}

/*
 * The process's shared regions: runs of pages already moved into a memfd,
 * sorted by address, never overlapping. A region that covers pages another
 * MR already shared reuses them, so every mapping of a page is one memfd's.
 */
struct shared {
	struct shared *next;
	uintptr_t start, end;
	int fd;
	int refs;			/* MRs using it */
	int ro;				/* sealed F_SEAL_FUTURE_WRITE: peers may only read it */
	int prot;			/* the pages' protection, given back with them */
};

static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static struct shared *shared_list;

/*
 * Moving pages, into a memfd or back, runs on a stack of its own
 * (swapcontext) with every signal blocked: the copy must hold everything
 * the caller's thread wrote to those pages, and a buffer on that thread's
 * stack shares pages with the frames doing the move. shared_mu serialises
 * it.
 */
static struct {
	ucontext_t caller, mover;
	uintptr_t start, end;
	int fd, prot, err;
	char stack[64 << 10] __attribute__((aligned(16)));
} mv;

/*
 * The mover maps by system call, not through libc's functions: a program's
 * memory hooks (UCX's, on libc's mmap) would take moving the pages for the
 * program unmapping them, drop its registration, and register again on
 * every use. The bytes at those addresses never change.
 */
static void *sys_mmap(void *at, size_t len, int prot, int flags, int fd)
{
	long r = syscall(SYS_mmap, at, len, prot, flags, fd, 0L);

	return r < 0 && r > -4096 ? MAP_FAILED : (void *)r;
}

/* Into mv.fd, mapped over the pages, which keep their protection. */
static void move_pages(void)
{
	size_t len = mv.end - mv.start;
	void *tmp = sys_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, mv.fd);

	mv.err = 0;
	if (tmp == MAP_FAILED) {
		mv.err = -errno;
		return;
	}
	memcpy(tmp, (void *)mv.start, len);
	if (sys_mmap((void *)mv.start, len, mv.prot, MAP_SHARED | MAP_FIXED, mv.fd) == MAP_FAILED)
		mv.err = -errno;
	syscall(SYS_munmap, tmp, len);
}

/*
 * Back into private memory of mv.prot: peers may keep their mapping of the
 * memfd, the program's pages must no longer be it.
 */
static void unmove_pages(void)
{
	size_t len = mv.end - mv.start;
	void *copy = sys_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);

	mv.err = 0;
	if (copy == MAP_FAILED) {
		mv.err = -errno;
		return;
	}
	memcpy(copy, (void *)mv.start, len);
	if (syscall(SYS_mremap, copy, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)mv.start) < 0) {
		mv.err = -errno;
		syscall(SYS_munmap, copy, len);
		return;
	}
	syscall(SYS_mprotect, (void *)mv.start, len, mv.prot);
}

/* shared_mu held: fn (move_pages, unmove_pages) on mv's own stack; its error. */
static int on_mover_stack(void (*fn)(void))
{
	if (getcontext(&mv.mover) < 0)
		return -errno;
	mv.mover.uc_stack.ss_sp = mv.stack;
	mv.mover.uc_stack.ss_size = sizeof(mv.stack);
	mv.mover.uc_link = &mv.caller;
	sigfillset(&mv.mover.uc_sigmask);
	makecontext(&mv.mover, fn, 0);
	if (swapcontext(&mv.caller, &mv.mover) < 0)
		return -errno;
	return mv.err;
}

/* The protection of [start, end) if it is private memory of one protection; -errno otherwise. */
static int private_prot(uintptr_t start, uintptr_t end)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512], perm[8];
	unsigned long lo, hi;
	int prot = -ENOENT;
	uintptr_t at = start;

	if (!f)
		return -errno;
	while (at < end && fgets(line, sizeof(line), f)) {
		int p;

		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perm) != 3 || hi <= at)
			continue;
		if (lo > at)
			break;	/* a hole */
		p = (perm[0] == 'r' ? PROT_READ : 0) | (perm[1] == 'w' ? PROT_WRITE : 0) |
		    (perm[2] == 'x' ? PROT_EXEC : 0);
		if (perm[3] != 'p' || (prot >= 0 && p != prot)) {
			prot = -EINVAL;	/* shared already, or of mixed protection */
			break;
		}
		prot = p;
		at = hi;
	}
	fclose(f);
	return at >= end ? prot : (prot < 0 ? prot : -EFAULT);
}

/*
 * Whether [s->start, s->end) is still s's memfd, mapped whole: a program
 * may unmap registered memory (free) and map something else there before
 * it deregisters (UCX's registration cache does), and then those pages are
 * no longer ours to move, nor to take as shared.
 */
static int still_shared(const struct shared *s)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[512], perm[8];
	unsigned long lo, hi, off, ino;
	uintptr_t at = s->start;
	struct stat st;

	if (!f || fstat(s->fd, &st) < 0) {
		if (f)
			fclose(f);
		return 0;
	}
	while (at < s->end && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%lx %7s %lx %*s %lu", &lo, &hi, perm, &off, &ino) != 5 || hi <= at)
			continue;
		if (lo > at || perm[3] != 's' || ino != st.st_ino || off + (at - lo) != at - s->start)
			break;
		at = hi;
	}
	fclose(f);
	return at >= s->end;
}

/*
 * shared_mu held: s loses a reference; with the last its pages go back to
 * private memory (unmove_pages), if they are still its, and it leaves the
 * list pp points into (NULL: on none, or taken off it already).
 */
static void unshare_seg(struct shared *s, struct shared **pp)
{
	if (--s->refs > 0)
		return;
	while (pp && *pp && *pp != s)
		pp = &(*pp)->next;
	if (pp && *pp)
		*pp = s->next;
	if (still_shared(s)) {
		mv.start = s->start, mv.end = s->end, mv.prot = s->prot;
		on_mover_stack(unmove_pages);
	}
	close(s->fd);
	free(s);
}

/*
 * shared_mu held: a sealed memfd of len bytes with [start, start + len)'s
 * pages, mapped over them; ro: then sealed against any new writable
 * mapping, so a peer granted it read-only cannot write it even by reopening
 * the fd through /proc (our own mapping stays writable). Pages that
 * ibv_fork_init keeps out of a child stay so.
 */
static struct shared *share_run(uintptr_t start, uintptr_t end, int ro)
{
	struct shared *s;
	int prot = private_prot(start, end);
	int fd = -1, err;

	if (prot < 0) {
		errno = -prot;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	fd = memfd_create("ffv-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, end - start) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
		goto fail;
	mv.start = start, mv.end = end, mv.fd = fd, mv.prot = prot;
	if ((err = on_mover_stack(move_pages))) {
		errno = -err;
		goto fail;
	}
	if (ibv_is_fork_initialized() == IBV_FORK_ENABLED)
		madvise((void *)start, end - start, MADV_DONTFORK);
	*s = (struct shared){ .start = start, .end = end, .fd = fd, .ro = ro, .prot = prot };
	if (ro && fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) < 0) {
		err = errno;
		s->refs = 1;
		unshare_seg(s, NULL);	/* on no list yet: the pages go back */
		errno = err;
		return NULL;
	}
	return s;
fail:
	if (fd >= 0)
		close(fd);
	free(s);
	return NULL;
}

/*
 * shared_mu held: the segments covering [start, end), sharing the runs not
 * shared yet; each gets a reference. Returns the count, or -errno: EINVAL
 * when a page is shared already the other way (read-only or writable: one
 * memfd cannot be both), ENOMEM past MAX_SEGS. A failure leaves the pages
 * as they were: what this call shared goes back.
 */
static int share(uintptr_t start, uintptr_t end, int ro, struct shared **segs)
{
	struct shared **pp = &shared_list;
	int n = 0, err;

	for (uintptr_t at = start; at < end;) {
		struct shared *s;

		while (*pp && (*pp)->end <= at)
			pp = &(*pp)->next;
		if (n == MAX_SEGS) {
			err = -ENOMEM;	/* more pieces than SEGMENTS carries */
			goto fail;
		}
		if (*pp && (*pp)->start <= at && !still_shared(*pp)) {
			/* Unmapped under its regions: new pages there are shared anew; it goes with them. */
			struct shared *gone = *pp;

			*pp = gone->next;
			gone->next = NULL;
			continue;
		}
		if (*pp && (*pp)->start <= at) {
			s = *pp;
			if (s->ro != ro) {
				err = -EINVAL;
				goto fail;
			}
		} else {
			uintptr_t run_end = *pp && (*pp)->start < end ? (*pp)->start : end;

			s = share_run(at, run_end, ro);
			if (!s) {
				err = -errno;
				goto fail;
			}
			s->next = *pp;
			*pp = s;
		}
		s->refs++;
		segs[n++] = s;
		at = s->end;
	}
	return n;
fail:
	while (n > 0)
		unshare_seg(segs[--n], &shared_list);
	return err;
}

static uint32_t random_key(void)
{
	uint32_t k = 0;

	while (k == 0 && getrandom(&k, sizeof(k), 0) != sizeof(k))
		;
	return k ? k : 1;
}

/* ctx->mu held: register [start, end) of mr with the agent; its pages become shared. */
static int register_remote(struct ffv_context *c, struct ffv_mr *mr, uint32_t pd)
{
	struct shared *segs[MAX_SEGS];
	uint8_t seg_bytes[MAX_SEGS * 16], buf[1024], val[24];
	int fds[MAX_SEGS], n, rn = 0, err;
	uintptr_t lo = floor_page(mr->start), hi = ceil_page(mr->end);
	struct ff_enc e;
	struct ff_msg m;
	const struct ff_attr *rkey;

	pthread_mutex_lock(&shared_mu);
	n = share(lo, hi, !(mr->access & WRITABLE), segs);
	pthread_mutex_unlock(&shared_mu);
	if (n < 0)
		return n;
	for (int i = 0; i < n; i++) {
		uintptr_t from = segs[i]->start > lo ? segs[i]->start : lo;
		uintptr_t to = segs[i]->end < hi ? segs[i]->end : hi;
		uint64_t off = from - segs[i]->start, len = to - from;

		memcpy(seg_bytes + 16 * i, &off, 8);
		memcpy(seg_bytes + 16 * i + 8, &len, 8);
		fds[i] = segs[i]->fd;
		lo = to;
	}
	{
		uint64_t addr = mr->start, len = mr->end - mr->start;
		uint32_t acc = (uint32_t)mr->access;

		memcpy(val, &addr, 8), memcpy(val + 8, &len, 8), memcpy(val + 16, &acc, 4);
		memcpy(val + 20, &pd, 4);
	}
	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_VERBS_MR_REG, ffv_next_seq(c));
	ff_enc_attr(&e, FF_ATTR_VERBS_MR, val, sizeof(val));
	ff_enc_attr(&e, FF_ATTR_SEGMENTS, seg_bytes, 16 * (size_t)n);
	err = ff_enc_finish(&e);
	if (err >= 0)
		err = ffv_agent_call(c, buf, err, fds, n, &m, sizeof(buf), NULL, &rn);
	if (!err && (m.type != FF_MSG_OK || !(rkey = ff_msg_get(&m, FF_ATTR_RKEY))))
		err = -EPROTO;
	if (err) {
		pthread_mutex_lock(&shared_mu);
		while (n > 0)
			unshare_seg(segs[--n], &shared_list);
		pthread_mutex_unlock(&shared_mu);
		return err > 0 ? -EPERM : err;
	}
	mr->vmr.ibv_mr.rkey = ff_attr_u32(rkey);
	mr->remote = 1;
	memcpy(mr->segs, segs, sizeof(segs[0]) * (size_t)n);
	mr->nsegs = n;
	return 0;
}

/* shared_mu taken: drop the references mr's segments hold. */
static void unshare_mr(struct ffv_mr *mr)
{
	pthread_mutex_lock(&shared_mu);
	while (mr->nsegs > 0)
		unshare_seg(mr->segs[--mr->nsegs], &shared_list);
	pthread_mutex_unlock(&shared_mu);
}

/* ctx->mu held: whether an MR of c has lkey. */
static int lkey_taken(struct ffv_context *c, uint32_t lkey)
{
	for (struct ffv_mr *mr = c->mrs; mr; mr = mr->next)
		if (mr->vmr.ibv_mr.lkey == lkey)
			return 1;
	return 0;
}

struct ibv_mr *ffv_reg_mr(struct ibv_pd *ibpd, void *addr, size_t len, uint64_t iova, int access)
{
	struct ffv_context *c = ffv_ctx(ibpd->context);
	struct ffv_mr *mr;
	int err = 0;

	(void)iova;
	/* As the IB spec: remote writes and atomics need local write too. */
	if (!addr || !len || (uintptr_t)addr + len < (uintptr_t)addr ||
	    ((access & WRITABLE) && !(access & IBV_ACCESS_LOCAL_WRITE))) {
		errno = EINVAL;
		return NULL;
	}
	mr = calloc(1, sizeof(*mr));
	if (!mr)
		return NULL;
	mr->start = (uintptr_t)addr;
	mr->end = (uintptr_t)addr + len;
	mr->access = access;
	mr->vmr.access = access;
	mr->vmr.mr_type = IBV_MR_TYPE_MR;
	ffv_lock(c);
	/* Unique in the context: a lookup finds one MR per lkey. */
	do
		mr->vmr.ibv_mr.lkey = random_key();
	while (lkey_taken(c, mr->vmr.ibv_mr.lkey));
	mr->vmr.ibv_mr.rkey = mr->vmr.ibv_mr.lkey;
	if (access & REMOTE_ACCESS)
		err = register_remote(c, mr, ffv_pd(ibpd)->num);
	if (!err) {
		mr->next = c->mrs;
		c->mrs = mr;
	}
	pthread_mutex_unlock(&c->mu);
	if (err) {
		free(mr);
		errno = -err;
		return NULL;
	}
	return &mr->vmr.ibv_mr;
}

int ffv_dereg_mr(struct verbs_mr *vmr)
{
	struct ffv_mr *mr = container_of(vmr, struct ffv_mr, vmr);
	struct ffv_context *c = ffv_ctx(vmr->ibv_mr.context);
	struct ffv_mr **pp;

	ffv_lock(c);
	for (pp = &c->mrs; *pp && *pp != mr; pp = &(*pp)->next)
		;
	if (*pp)
		*pp = mr->next;
	if (mr->remote) {
		uint8_t buf[256];
		struct ff_enc e;
		struct ff_msg m;
		int n, rn = 0;

		ff_enc_start(&e, buf, sizeof(buf), FF_MSG_VERBS_MR_DEREG, ffv_next_seq(c));
		ff_enc_u32(&e, FF_ATTR_RKEY, vmr->ibv_mr.rkey);
		n = ff_enc_finish(&e);
		if (n >= 0)
			ffv_agent_call(c, buf, n, NULL, 0, &m, sizeof(buf), NULL, &rn);
		/* After the agent forgot the rkey: a peer that asks again is refused. */
		for (struct ffv_qp *qp = c->qps; qp; qp = qp->next) {
			__atomic_fetch_add((uint32_t *)(qp->mem + FF_VQP_OFF_MR_GEN), 1, __ATOMIC_SEQ_CST);
			ffv_wire_forget(qp, mr->start, mr->end);
		}
		unshare_mr(mr);
	}
	pthread_mutex_unlock(&c->mu);
	free(mr);
	return 0;
}

struct ffv_mr *ffv_mr_find(struct ffv_context *c, uint32_t lkey, uint64_t addr, uint32_t len,
			   int access)
{
	for (struct ffv_mr *mr = c->mrs; mr; mr = mr->next)
		if (mr->vmr.ibv_mr.lkey == lkey)
			return addr >= mr->start && addr + len <= mr->end && addr + len >= addr &&
			       (mr->access & access) == access ? mr : NULL;
	return NULL;
}

/* ctx->mu held: map the region the agent grants (VERBS_MR_GRANT in m, its fds). */
static struct ffv_grant *map_grant(const struct ff_msg *m, const int *fds, int nfds)
{
	const struct ff_attr *mra = ff_msg_get(m, FF_ATTR_VERBS_MR), *sa = ff_msg_get(m, FF_ATTR_SEGMENTS);
	struct ffv_grant *g;
	uint64_t addr, len, at = 0;
	uint32_t acc;
	int prot;

	if (!mra || !sa || (int)(sa->len / 16) != nfds)
		return NULL;
	memcpy(&addr, mra->val, 8), memcpy(&len, mra->val + 8, 8), memcpy(&acc, mra->val + 16, 4);
	g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	g->start = addr;
	g->end = addr + len;
	g->access = (int)acc;
	g->map_len = ceil_page(g->end) - floor_page(g->start);
	if (g->end < g->start || g->map_len == 0)
		goto fail;
	prot = acc & WRITABLE ? PROT_READ | PROT_WRITE : PROT_READ;
	g->base = mmap(NULL, g->map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (g->base == MAP_FAILED)
		goto fail;
	for (int i = 0; i < nfds; i++) {
		uint64_t off, sl;

		memcpy(&off, sa->val + 16 * i, 8), memcpy(&sl, sa->val + 16 * i + 8, 8);
		if (sl > g->map_len - at || (off | sl) % PAGE ||
		    mmap(g->base + at, sl, prot, MAP_SHARED | MAP_FIXED, fds[i], off) == MAP_FAILED)
			goto unmap;
		at += sl;
	}
	if (at != g->map_len)
		goto unmap;
	return g;
unmap:
	munmap(g->base, g->map_len);
fail:
	free(g);
	return NULL;
}

static void grant_free(struct ffv_grant *g)
{
	munmap(g->base, g->map_len);
	free(g);
}

static uint32_t peer_mr_gen(const struct ffv_qp *qp)
{
	return __atomic_load_n((const uint32_t *)(qp->peer_mem + FF_VQP_OFF_MR_GEN), __ATOMIC_ACQUIRE);
}

/* ctx->mu held: ask the agent for the region rkey through qp (VERBS_MR_GET). */
static struct ffv_grant *fetch_grant(struct ffv_qp *qp, uint32_t rkey)
{
	uint32_t gen = peer_mr_gen(qp);	/* before asking: a dereg meanwhile makes us ask again */
	struct ffv_context *c = ffv_ctx(qp->vqp.qp.context);
	uint8_t buf[1024];
	int fds[MAX_SEGS], nfds = MAX_SEGS, n;
	struct ffv_grant *g = NULL;
	struct ff_enc e;
	struct ff_msg m;

	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_VERBS_MR_GET, ffv_next_seq(c));
	ff_enc_u32(&e, FF_ATTR_QPN, qp->vqp.qp.qp_num);
	ff_enc_u32(&e, FF_ATTR_RKEY, rkey);
	n = ff_enc_finish(&e);
	if (n < 0 || ffv_agent_call(c, buf, n, NULL, 0, &m, sizeof(buf), fds, &nfds))
		return NULL;
	if (m.type == FF_MSG_VERBS_MR_GRANT)
		g = map_grant(&m, fds, nfds);
	while (nfds > 0)
		close(fds[--nfds]);
	if (g) {
		g->peer_qpn = qp->peer_qpn;
		g->rkey = rkey;
		g->gen = gen;
		g->next = c->grants;
		c->grants = g;
	}
	return g;
}

uint8_t *ffv_grant_find(struct ffv_qp *qp, uint32_t rkey, uint64_t raddr, uint32_t len,
			int access, enum ibv_wc_status *status)
{
	struct ffv_context *c = ffv_ctx(qp->vqp.qp.context);
	struct ffv_grant *g, **pp;

	for (pp = &c->grants; (g = *pp); pp = &g->next)
		if (g->rkey == rkey && g->peer_qpn == qp->peer_qpn)
			break;
	if (g && g->gen != peer_mr_gen(qp)) {	/* the peer deregistered a region since */
		*pp = g->next;
		grant_free(g);
		g = NULL;
	}
	if (!g)
		g = fetch_grant(qp, rkey);
	*status = IBV_WC_REM_ACCESS_ERR;
	if (!g || (g->access & access) != access || raddr < g->start || raddr + len > g->end ||
	    raddr + len < raddr)
		return NULL;
	*status = IBV_WC_SUCCESS;
	return g->base + (raddr - floor_page(g->start));
}

void ffv_grants_drop(struct ffv_context *c)
{
	while (c->grants) {
		struct ffv_grant *g = c->grants;

		c->grants = g->next;
		grant_free(g);
	}
}
