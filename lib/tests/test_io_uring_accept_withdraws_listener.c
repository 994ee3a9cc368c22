/* SPDX-License-Identifier: MIT */
/* Description: a listener the program accepts on through io_uring (IORING_OP_ACCEPT, single and multishot, on the fd or as a fixed file given by io_uring_register or IORING_OP_FILES_UPDATE, also before listen()), whose connections the library never sees, is withdrawn when the entry is submitted (or never registered): UNLISTEN at once, every connector gets overlay listener-not-freeflow at once (never peer-timeout), bytes intact; a later accept() on it takes its connection on the overlay; a forked child's withdrawal of its parent's listener sends no UNLISTEN and never registers it in the child's name */
#include "shimtest.h"
#include "uring.h"

#define N	100000

/* Lines "listen <pid>" in the agent log. */
static int listens_by(pid_t pid)
{
	char line[64];

	snprintf(line, sizeof(line), "listen %d\n", (int)pid);
	return t_agent_count(line);
}

static void push_accept(struct uring *u, int fd, unsigned sqe_flags, uint16_t ioprio)
{
	struct io_uring_sqe e = { .opcode = IORING_OP_ACCEPT, .fd = fd, .flags = (uint8_t)sqe_flags,
				  .ioprio = ioprio };

	uring_push(u, &e);
}

/* A connection (connecting end cfd, accepted end sfd) on the overlay, bytes intact both ways; both closed. */
static void overlay_intact(int cfd, int sfd, const char *name)
{
	CHECK(!t_swapped(cfd) && !t_swapped(sfd), "%s: swapped", name);
	CHECK(t_send_stream(cfd, N, 1) == 0 && t_recv_stream(sfd, N, 1) == 0,
	      "%s: the connector's bytes did not arrive intact", name);
	CHECK(t_send_stream(sfd, N, 2) == 0 && t_recv_stream(cfd, N, 2) == 0,
	      "%s: the acceptor's bytes did not arrive intact", name);
	close(cfd);
	close(sfd);
}

/* Connect to port; io_uring accepts it (the next completion). */
static void connect_uring(struct uring *u, uint16_t port, const char *name)
{
	int cfd = t_connect(AF_INET, port), sfd = uring_next(u, NULL);

	CHECK(sfd >= 0, "%s: io_uring accept: %s", name, strerror(-sfd));
	if (sfd >= 0)
		overlay_intact(cfd, sfd, name);
}

/* Submitting the accept on lfd withdrew it: one more UNLISTEN, before the enter returned. */
static void withdrawn(int unlistens, const char *name)
{
	CHECK(t_agent_count("unlisten") == unlistens, "%s: %d UNLISTEN, want %d", name,
	      t_agent_count("unlisten"), unlistens);
}

int main(int argc, char **argv)
{
	int lfd[4], fds[3], cfd, sfd, plfd, early;
	struct io_uring_files_update up = { .offset = 2, .fds = (uintptr_t)&early };
	struct sockaddr_storage ss;
	uint16_t port[4], p;
	socklen_t sl;
	struct uring u;
	pid_t pid;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	for (int i = 0; i < 4; i++)
		lfd[i] = t_listen(AF_INET, &port[i]);
	CHECK(t_agent_count("listen") == 4, "%d LISTEN", t_agent_count("listen"));
	if (uring_init(&u)) {
		printf("no io_uring here: %s\n", strerror(errno));
		return T_EXIT_SKIP;
	}

	/* A single-shot accept; then plain accept() on the same listener. */
	push_accept(&u, lfd[0], 0, 0);
	CHECK(uring_enter(&u, 1, 0) == 0, "submit the accept");
	withdrawn(1, "single-shot");
	connect_uring(&u, port[0], "single-shot");
	cfd = t_connect(AF_INET, port[0]);
	sfd = accept(lfd[0], NULL, NULL);
	CHECK(sfd >= 0, "accept() after io_uring's: %s", strerror(errno));
	overlay_intact(cfd, sfd, "accept() after io_uring's");

	/* Multishot: one entry, every connection. */
	push_accept(&u, lfd[1], 0, IORING_ACCEPT_MULTISHOT);
	CHECK(uring_enter(&u, 1, 0) == 0, "submit the multishot accept");
	withdrawn(2, "multishot");
	connect_uring(&u, port[1], "multishot 1");
	connect_uring(&u, port[1], "multishot 2");

	/* Fixed files: registered, then given by IORING_OP_FILES_UPDATE. */
	fds[0] = lfd[2];
	fds[1] = fds[2] = -1;
	CHECK(syscall(SYS_io_uring_register, u.fd, IORING_REGISTER_FILES, fds, 3) == 0,
	      "register files: %s", strerror(errno));
	withdrawn(3, "registered as a fixed file");
	push_accept(&u, 0, IOSQE_FIXED_FILE, 0);
	CHECK(uring_enter(&u, 1, 0) == 0, "submit the fixed accept");
	connect_uring(&u, port[2], "fixed file");
	uring_push(&u, &(struct io_uring_sqe){ .opcode = IORING_OP_FILES_UPDATE,
					       .addr = (uintptr_t)&lfd[3], .len = 1, .off = 1 });
	CHECK(uring_enter(&u, 1, 1) == 0 && uring_next(&u, NULL) == 1, "files update");
	withdrawn(4, "given by IORING_OP_FILES_UPDATE");
	push_accept(&u, 1, IOSQE_FIXED_FILE, 0);
	CHECK(uring_enter(&u, 1, 0) == 0, "submit the updated fixed accept");
	connect_uring(&u, port[3], "updated fixed file");

	/* A socket given as a fixed file before it listens: listen() does not register it. */
	early = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	sl = t_addr(AF_INET, &ss, 0);
	CHECK(early >= 0 && !bind(early, (void *)&ss, sl), "bind: %s", strerror(errno));
	CHECK(syscall(SYS_io_uring_register, u.fd, IORING_REGISTER_FILES_UPDATE, &up, 1) == 1,
	      "update files: %s", strerror(errno));
	CHECK(!listen(early, 16) && !getsockname(early, (void *)&ss, &sl), "listen: %s",
	      strerror(errno));
	CHECK(t_agent_count("listen") == 4, "a socket given to io_uring before listen() registered");
	push_accept(&u, 2, IOSQE_FIXED_FILE, 0);
	CHECK(uring_enter(&u, 1, 0) == 0, "submit the accept on the early fixed file");
	connect_uring(&u, ntohs(((struct sockaddr_in *)&ss)->sin_port), "fixed before listen()");
	close(early);
	CHECK(t_agent_count("overlay listener-not-freeflow") == 7, "%d overlay listener-not-freeflow",
	      t_agent_count("overlay listener-not-freeflow"));
	CHECK(t_agent_count("overlay peer-timeout") == 0, "%d connections waited for an ACCEPT",
	      t_agent_count("overlay peer-timeout"));
	close(u.fd);

	/*
	 * A forked child accepts on its parent's listener through io_uring:
	 * not its registration to withdraw, and its first session (a
	 * connection of its own) does not register the inherited one in its
	 * name, nor those the parent withdrew.
	 */
	plfd = t_listen(AF_INET, &p);
	pid = fork();
	if (pid == 0) {
		struct uring cu;

		CHECK(uring_init(&cu) == 0, "child's io_uring");
		push_accept(&cu, plfd, 0, 0);
		CHECK(uring_enter(&cu, 1, 0) == 0, "submit the child's accept");
		close(t_connect(AF_INET, port[0]));
		close(plfd);
		_exit(t_exit_code());
	}
	t_wait_child(pid, "the forked acceptor");
	CHECK(listens_by(pid) == 0, "the child registered %d listeners", listens_by(pid));
	withdrawn(4, "the child's accept on its parent's listener");
	for (int i = 0; i < 4; i++)
		close(lfd[i]);
	close(plfd);
	withdrawn(5, "the withdrawn listeners and the parent's own closed");
	return t_shim_finish();
}
