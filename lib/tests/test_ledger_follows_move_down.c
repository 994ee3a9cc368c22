/* SPDX-License-Identifier: MIT */
/* Description: a ledger entry names the fd its connection is at and the inode of the socket there (so the agent can tell a connection closed behind the library), and follows the connection when it moves down to a socket pair at a fork, at both ends: path unix, reason moved-down, no shm bytes, the new socket's inode; the fork child lists the connections it inherited in its own ledger at its first data call on one, so they stay listed once the parent closes its copies */
/* Channels: shm */
#include <sys/wait.h>

#include "shimtest.h"

/* Which live entries are counted: on path, with reason, holding bytes, whose fd holds the socket they name. */
struct want {
	int path;
	const char *reason;
	uint32_t bytes;
};

static long held(int lfd, const void *arg)
{
	const struct want *w = arg;
	uint8_t e[FF_LEDGER_ENTRY];
	long n = 0;

	for (off_t at = FF_LEDGER_HDR; pread(lfd, e, sizeof(e), at) == sizeof(e);
	     at += FF_LEDGER_ENTRY) {
		uint32_t seq, bytes;
		int32_t fd;
		uint64_t ino;
		struct stat st;

		memcpy(&seq, e + FF_LEDGER_E_SEQ, 4);
		memcpy(&bytes, e + FF_LEDGER_E_BYTES, 4);
		memcpy(&fd, e + FF_LEDGER_E_FD, 4);
		memcpy(&ino, e + FF_LEDGER_E_INO, 8);
		n += (seq & 1) && e[FF_LEDGER_E_PATH] == w->path && bytes == w->bytes &&
		     e[FF_LEDGER_E_REASON_LEN] == strlen(w->reason) &&
		     !memcmp(e + FF_LEDGER_E_REASON, w->reason, strlen(w->reason)) &&
		     !fstat(fd, &st) && S_ISSOCK(st.st_mode) && (uint64_t)st.st_ino == ino;
	}
	return n;
}

static int entries(int path, const char *reason, uint32_t bytes)
{
	return t_ledger_sum(held, &(struct want){ path, reason, bytes });
}

/* The fork child: uses an inherited connection, says so, waits for the word, closes what it holds. */
static void child(int cfd, int sfd, int ready, int go)
{
	char c;

	if (write(cfd, "c", 1) != 1 || write(ready, "r", 1) != 1 || read(go, &c, 1) != 1)
		_exit(1);
	close(cfd);
	close(sfd);
	_exit(0);
}

int main(int argc, char **argv)
{
	uint32_t shm = FF_SHM_RESIDENT(fa_shm_ring());	/* what the channel holds drained */
	int cfd, sfd, status, ready[2], go[2];
	char c;
	pid_t pid;

	(void)argc;
	t_setup_swapped_pair(argv, &cfd, &sfd);
	CHECK(entries(FF_PATH_SHM, "", shm) == 2,
	      "%d live shm entries naming the fd and inode of their bell socket, want both ends",
	      entries(FF_PATH_SHM, "", shm));

	CHECK(!pipe(ready) && !pipe(go), "pipes");
	pid = fork();	/* moves every shm connection down first */
	if (pid == 0)
		child(cfd, sfd, ready[1], go[0]);
	CHECK(pid > 0 && read(ready[0], &c, 1) == 1, "the child did not use its connection");
	CHECK(read(sfd, &c, 1) == 1 && c == 'c', "the child's byte after the fork");
	CHECK(!t_shm_base(), "still on shm after the fork");
	CHECK(entries(FF_PATH_UNIX, "moved-down", 0) == 4,
	      "%d live entries say unix moved-down, no shm bytes, with the new socket's inode; "
	      "want both ends in the parent's ledger and in the child's (%d still say shm)",
	      entries(FF_PATH_UNIX, "moved-down", 0), t_ledger_entries(FF_PATH_SHM, ""));
	close(cfd);
	close(sfd);
	CHECK(t_ledger_entries(FF_PATH_UNIX, "moved-down") == 2,
	      "%d live entries once the parent closed its copies; want the child's two",
	      t_ledger_entries(FF_PATH_UNIX, "moved-down"));
	CHECK(write(go[1], "g", 1) == 1 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
	      !WEXITSTATUS(status), "the child failed");
	CHECK(t_ledger_ends(1) == 0, "%d live entries after the last closes", t_ledger_ends(1));
	return t_shim_finish();
}
