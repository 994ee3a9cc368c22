/* SPDX-License-Identifier: MIT */
/*
 * The ledger: this process's live connections, those decided over a link
 * and those the agent answered, in a memfd the agent maps read-only
 * (docs/PROTOCOL.md, "The ledger").
 *
 * Design note.
 * - A notice to the agent per linked connection (open and close, at each
 *   end) cost the agent more CPU than the link saved: four wake-ups of a Go
 *   process per connection. The ledger costs none: the agent reads it only
 *   when it lists or counts.
 * - The connections the agent answered are listed here too: an agent
 *   keeps them in memory only, so one that restarted would not know them,
 *   nor the shm memory they hold. It finds the ledgers of its host's
 *   processes itself (by the memfd's name, "freeflow-ledger"), without
 *   waiting for them to talk.
 * - It is made on the process's first session, right after HELLO, so that
 *   the first answer may bring a link already (links are used only once
 *   the agent has it); a process that never talks to the agent pays
 *   nothing, nor one whose agent is away. Its memfd stays open: a session
 *   opened after one broke (the agent may have restarted, empty) sends it
 *   again (listeners.c), as it re-sends LISTEN.
 * - 65536 entries (the agent lists as many connections at most) of 128
 *   bytes (room for a reason): the mapping is 8 MiB, but an entry given
 *   back is reused before a new one is handed out, so only the pages of as
 *   many entries as were ever live at once are touched. The header says
 *   how many were handed out (`used`), so the agent reads no further: it
 *   reads a ledger on every new channel, and looking at all 2048 pages
 *   cost it more than the rest of the decision.
 * - An entry is published seqlock-style (fields, then seq odd with a release
 *   store; seq even again at close); the agent takes it only when it reads
 *   the same odd seq before and after the fields.
 * - Entries are named by generation and index: a fork child gets a new
 *   generation (its inherited connections' entries are its parent's, and
 *   stay its parent's to clear), and so does every ledger made after it.
 * - An entry names the fd the connection is at and the inode of the socket
 *   there, and is rewritten when the connection moves down to a socket
 *   pair: the agent checks that the process still holds that socket, so a
 *   close the library never sees (an inline system call) still ends the
 *   listing and the shm charge.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent.h"
#include "core/core.h"
#include "freeflow/ledger_layout.h"
#include "freeflow/proto.h"

#define SLOTS		FF_LEDGER_SLOTS_MAX
#define HDR		FF_LEDGER_HDR
#define ENTRY		FF_LEDGER_ENTRY
#define REASON_MAX	FF_LEDGER_REASON_MAX

#define SIZE		(HDR + (size_t)SLOTS * ENTRY)

static pthread_mutex_t make_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;	/* the entries; after the table lock */
static uint8_t *base;		/* the mapping, once the agent has it; NULL: no ledger */
static int ledger_fd = -1;	/* its memfd, to send it again to a restarted agent */
static _Atomic int sent;	/* base and ledger_fd are set */
static uint32_t gen = 1;	/* of the current ledger */
static uint32_t used;		/* entries handed out so far: indexes 0 .. used-1 */
static uint32_t *free_ix;	/* entries given back, reused last-in first */
static uint32_t nfree, free_cap;

_Atomic int ff_ledger_inherit_pending;

static _Atomic uint32_t *seq_of(uint32_t i)
{
	return (_Atomic uint32_t *)(void *)(base + HDR + (size_t)i * ENTRY + FF_LEDGER_E_SEQ);
}

/* A new ledger: its memfd (or -errno), mapped at *at. */
static int make(uint8_t **at)
{
	const int seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
	int fd = memfd_create("freeflow-ledger", MFD_CLOEXEC | MFD_ALLOW_SEALING), ret;
	void *p;

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)SIZE) || ff_real.fcntl(fd, F_ADD_SEALS, seals) ||
	    (p = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
		ret = -errno;
		ff_real.close(fd);
		return ret;
	}
	*at = p;
	memcpy(p, FF_LEDGER_MAGIC, 4);
	*(uint32_t *)(void *)(*at + FF_LEDGER_OFF_VERSION) = FF_LEDGER_VERSION;
	*(uint32_t *)(void *)(*at + FF_LEDGER_OFF_SLOTS) = SLOTS;
	*(uint32_t *)(void *)(*at + FF_LEDGER_OFF_ENTRY) = ENTRY;
	*(uint32_t *)(void *)(*at + FF_LEDGER_OFF_USED_KEPT) = 1;
	return fd;
}

/*
 * make_mu held (not mu: sending may open a session, which takes the table
 * lock, under which mu is taken): make the ledger and send it on a (NULL:
 * this thread's session). Once per process: on its first session
 * (ff_ledger_first, which only tries make_mu: the thread holding it may be
 * the one whose send opened that session), or later (ff_ledger_ready).
 */
static int make_and_send(struct ff_agent *a)
{
	uint8_t *at = NULL;
	int fd, ret = 0;

	if (!atomic_load(&sent)) {
		fd = make(&at);
		ret = fd < 0 ? fd : a ? ff_send_ledger_on(a, fd) : ff_send_ledger(fd);
		if (!ret) {
			pthread_mutex_lock(&mu);
			base = at;
			ledger_fd = fd;
			atomic_store(&sent, 1);
			pthread_mutex_unlock(&mu);
		} else if (at) {	/* a ledger the agent lacks is no use: the next link tries again */
			munmap(at, SIZE);
			ff_real.close(fd);
		}
	}
	if (ret)
		ff_debug("no ledger for the agent (%s): links not used, answers listed by the agent alone",
			 strerror(-ret));
	return ret;
}

int ff_ledger_ready(void)
{
	int ret;

	if (atomic_load_explicit(&sent, memory_order_acquire))
		return 0;
	pthread_mutex_lock(&make_mu);
	ret = make_and_send(NULL);
	pthread_mutex_unlock(&make_mu);
	return ret;
}

void ff_ledger_first(struct ff_agent *a)
{
	/* Held: another thread makes it, or this one, whose send opened a; either sends it. */
	if (atomic_load_explicit(&sent, memory_order_acquire) || pthread_mutex_trylock(&make_mu))
		return;
	make_and_send(a);
	pthread_mutex_unlock(&make_mu);
}

int ff_ledger_held(void)
{
	return atomic_load_explicit(&sent, memory_order_acquire);
}

int ff_ledger_resend(struct ff_agent *a)
{
	return atomic_load_explicit(&sent, memory_order_acquire) ? ff_send_ledger_on(a, ledger_fd) : 0;
}

uint64_t ff_ledger_reserve(void)
{
	uint64_t e = 0;

	pthread_mutex_lock(&mu);
	if (base && nfree)
		e = (uint64_t)gen << 32 | (free_ix[--nfree] + 1u);
	else if (base && used < SLOTS) {
		e = (uint64_t)gen << 32 | ++used;
		/* Before the entry is published: the agent reads up to it. */
		atomic_store_explicit((_Atomic uint32_t *)(void *)(base + FF_LEDGER_OFF_USED), used,
				      memory_order_release);
	}
	pthread_mutex_unlock(&mu);
	return e;
}

/* mu held: give index i back (if there is no room to note it, it stays used). */
static void give_back(uint32_t i)
{
	if (nfree == free_cap) {
		uint32_t cap = free_cap ? 2 * free_cap : 64;
		uint32_t *p = realloc(free_ix, cap * sizeof(*p));

		if (!p)
			return;
		free_ix = p;
		free_cap = cap;
	}
	free_ix[nfree++] = i;
}

/* mu held: e's index if it is an entry of the current ledger, else -1. */
static int64_t index_of(uint64_t e)
{
	if (!e || !base || (uint32_t)(e >> 32) != gen)
		return -1;
	return (int64_t)(uint32_t)e - 1;
}

/* mu held: entry i's path, bytes, reason, and where it is: fd and its socket's inode. */
static void put_state(uint8_t *p, int fd, uint8_t path, uint32_t bytes, const char *reason)
{
	size_t rn = reason ? strnlen(reason, REASON_MAX) : 0;
	struct stat st;

	*(uint32_t *)(void *)(p + FF_LEDGER_E_BYTES) = bytes;
	p[FF_LEDGER_E_PATH] = path;
	p[FF_LEDGER_E_REASON_LEN] = (uint8_t)rn;
	memcpy(p + FF_LEDGER_E_REASON, reason ? reason : "", rn);
	*(int32_t *)(void *)(p + FF_LEDGER_E_FD) = fd;
	/* 0 (not checked) if fd cannot be read: never an inode the agent would take as closed. */
	*(uint64_t *)(void *)(p + FF_LEDGER_E_INO) = fstat(fd, &st) ? 0 : (uint64_t)st.st_ino;
}

/* mu held: entry p's endpoints. */
static void put_ends(uint8_t *p, const struct ff_ends *ends)
{
	/* v4-mapped kept: parking makes an IPv6 socket for a dual-stack program. */
	int ll = ff_endpoint_as_is(&ends->local, p + FF_LEDGER_E_LOCAL);
	int rl = ff_endpoint(&ends->remote, p + FF_LEDGER_E_REMOTE);

	p[FF_LEDGER_E_LOCAL_LEN] = ll > 0 ? (uint8_t)ll : 0;
	p[FF_LEDGER_E_REMOTE_LEN] = rl > 0 ? (uint8_t)rl : 0;
}

void ff_ledger_publish(uint64_t e, const struct ff_ledger_row *row)
{
	int64_t i;
	uint8_t *p;

	pthread_mutex_lock(&mu);
	i = index_of(e);
	if (i >= 0) {
		p = base + HDR + (size_t)i * ENTRY;
		put_ends(p, row->ends);
		put_state(p, row->fd, row->path, row->bytes, row->reason);
		if (row->alone) {	/* the agent counts what it answered itself */
			size_t at = row->path == FF_PATH_SHM	    ? FF_LEDGER_OFF_OPENED
				    : row->path == FF_PATH_OVERLAY ? FF_LEDGER_OFF_NO_LIBRARY
								   : FF_LEDGER_OFF_OPENED_TCP;

			atomic_fetch_add_explicit((_Atomic uint64_t *)(void *)(base + at), 1,
						  memory_order_relaxed);
		}
		atomic_fetch_add_explicit(seq_of((uint32_t)i), 1, memory_order_release);
	}
	pthread_mutex_unlock(&mu);
}

/*
 * The entry's seq goes even while it is rewritten: the agent skips it for
 * that moment, and lists the connection from its own account meanwhile.
 */
void ff_ledger_moved(uint64_t e, int fd, uint8_t path, uint32_t bytes, const char *reason,
		     const struct ff_ends *ends)
{
	int64_t i;
	uint8_t *p;

	pthread_mutex_lock(&mu);
	i = index_of(e);
	if (i >= 0) {
		p = base + HDR + (size_t)i * ENTRY;
		atomic_fetch_add_explicit(seq_of((uint32_t)i), 1, memory_order_release);
		if (ends)
			put_ends(p, ends);
		put_state(p, fd, path, bytes, reason);
		atomic_fetch_add_explicit(seq_of((uint32_t)i), 1, memory_order_release);
	}
	pthread_mutex_unlock(&mu);
}

void ff_ledger_release(uint64_t e)
{
	int64_t i;

	pthread_mutex_lock(&mu);
	i = index_of(e);
	if (i >= 0)
		give_back((uint32_t)i);
	pthread_mutex_unlock(&mu);
}

void ff_ledger_close(uint64_t e)
{
	int64_t i;

	pthread_mutex_lock(&mu);
	i = index_of(e);
	if (i >= 0) {
		atomic_fetch_add_explicit(seq_of((uint32_t)i), 1, memory_order_release);
		give_back((uint32_t)i);
	}
	pthread_mutex_unlock(&mu);
}

/* Table lock held: whether e is an entry of the current ledger. */
static int current(uint64_t e)
{
	int64_t i;

	pthread_mutex_lock(&mu);
	i = index_of(e);
	pthread_mutex_unlock(&mu);
	return i >= 0;
}

/*
 * A fork child's connections are listed in its parent's ledger, an exec'd
 * image's in the old image's (whose memfd the exec closed): when the
 * parent closes its copy (a server that forks a worker per connection, or
 * forks and execs one, as sshd does), or the old image is gone, nothing
 * would list what this process holds. So at its first data call on a
 * swapped fd it lists them in its own ledger: path as the socket at the
 * fd is (after fork and exec, never shm), moved-down for a connection
 * that came off shm. One try: an agent that is away then misses them
 * (they show once the process exits: nothing is lost but the listing).
 */
void ff_ledger_list_inherited(void)
{
	int hw;

	if (!atomic_exchange(&ff_ledger_inherit_pending, 0) || ff_ledger_ready())
		return;
	ff_table_lock();
	hw = ff_table_hiwater();
	for (int fd = 0; fd <= hw; fd++) {
		struct ff_conn *c = ff_fd_slot(fd)->conn;
		uint64_t e;

		if (!c || c->state != FF_ST_SWAPPED || c->shm || current(c->ledger))
			continue;
		e = ff_ledger_reserve();
		if (!e)
			break;
		ff_ledger_publish(e, &(struct ff_ledger_row){
			.fd = fd, .ends = &c->ends,
			.path = c->kern_family == AF_UNIX ? FF_PATH_UNIX : FF_PATH_HOST_TCP,
			.reason = c->moved == FF_MOVED_PAIR ? "moved-down" : NULL });
		c->ledger = e;
	}
	ff_table_unlock();
}

/* make_mu first (fork.c takes these before the table lock), mu after it. */
void ff_ledger_atfork_prepare(void)
{
	pthread_mutex_lock(&make_mu);
}

void ff_ledger_atfork_locked(void)
{
	pthread_mutex_lock(&mu);
}

void ff_ledger_atfork_parent(void)
{
	pthread_mutex_unlock(&mu);
	pthread_mutex_unlock(&make_mu);
}

void ff_ledger_atfork_child(void)
{
	if (base) {
		munmap(base, SIZE);
		ff_real.close(ledger_fd);
	}
	base = NULL;
	ledger_fd = -1;
	atomic_store(&sent, 0);
	gen++;
	used = nfree = 0;
	atomic_store(&ff_ledger_inherit_pending, 1);
	pthread_mutex_unlock(&mu);
	pthread_mutex_unlock(&make_mu);
}
