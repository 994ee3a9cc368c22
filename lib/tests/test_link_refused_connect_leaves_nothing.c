/* SPDX-License-Identifier: MIT */
/* Description: a connect() refused by the kernel while a link leads to that endpoint fails as it would without the library (-1, ECONNREFUSED; blocking, or non-blocking with SO_ERROR) and leaves no fd or mapping behind: neither the channel it offered over the link (the listener stopped, its process still holding the link), nor the link that died with the closed listener (its channel unmapped in the background); a connection to a new listener then works */
/* Channels: shm-link */
#include <poll.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>

#include "shimtest.h"

#define N		(64u << 10)
#define REFUSED		2	/* refused connects of each kind per case */
/* A LINK_OFFER from an IPv4 connector, as it sits in the acceptor's link. */
#define OFFER_LEN	(FF_HDR_LEN + 2 * (FF_ATTR_HDR_LEN + FF_EP4_LEN) + FF_ATTR_HDR_LEN + 4)

/* What the client asks of the server over ctl, one byte each, answered by one byte. */
enum { STOP = 's', CLOSE = 'c', NEW = 'n' };

static void say(int ctl, char what)
{
	char ok;

	CHECK(write(ctl, &what, 1) == 1 && read(ctl, &ok, 1) == 1, "the server did not do '%c'",
	      what);
}

static void exchange(int fd, const char *who, int first)
{
	if (first) {
		CHECK(t_send_stream(fd, N, 1) == 0, "%s send", who);
		CHECK(t_recv_stream(fd, N, 2) == 0, "%s receive: data lost or corrupted", who);
	} else {
		CHECK(t_recv_stream(fd, N, 1) == 0, "%s receive: data lost or corrupted", who);
		CHECK(t_send_stream(fd, N, 2) == 0, "%s send", who);
	}
}

static void serve_one(int lfd)
{
	int fd = accept(lfd, NULL, NULL);

	CHECK(fd >= 0 && t_swapped(fd), "server: connection not accepted swapped");
	exchange(fd, "server", 0);
	close(fd);
}

/* The listener is this process's alone, so that closing it ends it. */
static int server(int ctl)
{
	uint16_t port;
	int lfd = t_listen(AF_INET, &port), link = -1, queued = -1;
	char c;

	CHECK(write(ctl, &port, sizeof(port)) == sizeof(port), "port");
	serve_one(lfd);
	while (read(ctl, &c, 1) == 1) {
		if (c == STOP) {
			/* The listener refuses connections; this process keeps the link. */
			CHECK(shutdown(lfd, SHUT_RD) == 0, "shutdown of the listener: %s",
			      strerror(errno));
		} else if (c == CLOSE) {
			/*
			 * The client's refused connects did offer their channels: on a
			 * seqpacket socket SIOCINQ counts every datagram queued.
			 */
			CHECK(t_link_fds(&link, 1) == 1, "the server holds no link");
			ioctl(link, SIOCINQ, &queued);
			/* And the client's first non-blocking connect (main). */
			CHECK(queued == (2 * REFUSED + 1) * OFFER_LEN,
			      "%d bytes of offers queued on the link, not %d", queued,
			      (2 * REFUSED + 1) * OFFER_LEN);
			close(lfd);
		} else if (c == NEW) {
			lfd = t_listen(AF_INET, &port);
			CHECK(write(ctl, &port, sizeof(port)) == sizeof(port), "new port");
			serve_one(lfd);
			close(lfd);
			break;
		}
		CHECK(write(ctl, &c, 1) == 1, "answer");
	}
	return t_exit_code();
}

/* A connect() to port that must be refused; nonblock: by SO_ERROR. */
static void refused(uint16_t port, int nonblock, const char *what)
{
	struct sockaddr_storage ss;
	socklen_t len = t_addr(AF_INET, &ss, port), el = sizeof(int);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);
	int ret = connect(fd, (void *)&ss, len), err = errno;

	if (nonblock && ret == -1 && err == EINPROGRESS) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };

		CHECK(poll(&p, 1, 5000) == 1, "%s: the refused connect never completed", what);
		CHECK(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0, "%s: SO_ERROR: %s",
		      what, strerror(errno));
	}
	CHECK(ret == -1 && err == ECONNREFUSED, "%s: connect returned %d, %s", what, ret,
	      strerror(err));
	close(fd);
}

/*
 * REFUSED blocking and non-blocking connects to port: each leaves the fds
 * there were (fds), and once a dead link's channels are unmapped in the
 * background (src/shm/spill.c), no more mappings than before.
 */
static void refused_all(uint16_t port, int fds, const char *why)
{
	int maps = t_shm_maps();
	char what[96];

	for (int i = 0; i < 2 * REFUSED; i++) {
		snprintf(what, sizeof(what), "%s, %sblocking connect %d", why, i % 2 ? "non-" : "",
			 i / 2);
		refused(port, i % 2, what);
		CHECK(t_count_fds() == fds, "%s: %d fds after it, %d expected", what, t_count_fds(),
		      fds);
	}
	for (int i = 0; i < 200 && t_shm_maps() > maps; i++)
		usleep(10000);
	CHECK(t_shm_maps() <= maps, "%s: %d shm mappings 2 s after the refused connects, %d before",
	      why, t_shm_maps(), maps);
}

int main(int argc, char **argv)
{
	uint16_t port;
	int ctl, fd, links;
	pid_t pid;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	port = t_fork_server(server, &ctl, &pid);
	fd = t_connect(AF_INET, port);
	CHECK(t_swapped(fd), "the first connection is not swapped");
	exchange(fd, "client", 1);
	close(fd);
	CHECK(t_link_fds(&links, 1) == 1, "the first connection left no link");

	say(ctl, STOP);
	/* The first non-blocking connect makes the settler's eventfd (src/setup/settler.c): the library's own. */
	refused(port, 1, "the first non-blocking connect");
	refused_all(port, t_count_fds(), "listener stopped");
	say(ctl, CLOSE);
	/* The link died with the listener: the first offer over it drops it, and nothing else. */
	refused_all(port, t_count_fds() - 1, "listener closed");
	CHECK(t_link_fds(&links, 1) == 0, "the dead link is still held");

	CHECK(write(ctl, &(char){ NEW }, 1) == 1 && read(ctl, &port, sizeof(port)) ==
	      sizeof(port), "the server's new listener");
	fd = t_connect(AF_INET, port);
	CHECK(t_swapped(fd), "the connection to the new listener is not swapped");
	exchange(fd, "client", 1);
	close(fd);
	t_wait_child(pid, "server");
	/* Only the two connections that were made were asked about; no connect is in a ledger. */
	CHECK(t_agent_count("ask") == 4, "%d asks, not 4", t_agent_count("ask"));
	CHECK(t_agent_count("swap shm link") == 2, "%d swaps with a link, not 2",
	      t_agent_count("swap shm link"));
	CHECK(t_agent_await("closed", 4) == 4, "%d CLOSED", t_agent_count("closed"));
	CHECK(t_ledger_ends(0) == 0, "%d linked ends", t_ledger_ends(0));
	return t_shim_finish();
}
