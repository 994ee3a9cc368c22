/* SPDX-License-Identifier: MIT */
/* Description: a connecting process that writes junk over its link (random bytes, a datagram too long, LINK_OFFERs with no fd, one fd or too many, offers for another container's address or another port, an offer whose memfd is a pipe) harms none of the accepting process's other connections: it drops and closes each, the link keeps carrying real connections (no ask to the agent), data intact both ways, and its fds come back to what they were; the offer with a pipe makes only the connection it names go through the agent (both ends ask, both end on the same fast path), and the connector's own offers it leaves behind on the link, withdrawn, are closed once older than an acceptor keeps offers */
/* Channels: shm-link */
#include "shimtest.h"

#define N		(64u << 10)
/* How long an acceptor keeps an offer it drained but has no connection for (link.c). */
#define PENDING_KEEP_MS	1000

/* What the connecting process writes over its link before a connection. */
enum junk {
	J_NONE,
	J_RANDOM,		/* 100 random bytes */
	J_TOO_LONG,		/* 4000 random bytes: more than any offer */
	J_NO_FDS,		/* a well-formed LINK_OFFER without its fds */
	J_ONE_FD,		/* ... with one fd */
	J_FIVE_FDS,		/* ... with five */
	J_OTHER_ADDR,		/* a whole offer for a connector at 127.0.0.2, not the link's */
	J_OTHER_PORT,		/* a whole offer for another acceptor port */
	J_PIPE_MEMFD,		/* an offer for the next connection, with a pipe as its memfd */
};

static const struct round {
	enum junk junk;
	int linked;		/* over the link: swapped without asking the agent (else both ask) */
	int held;		/* fds the server may hold after it, more than at first */
	int later;		/* made once the server's drained offers are old enough to go */
} rounds[] = {
	{ J_NONE, 0, 0, 0 },	/* through the agent, which hands the link */
	{ J_NONE, 1, 0, 0 },
	{ J_RANDOM, 1, 0, 0 },
	{ J_TOO_LONG, 1, 0, 0 },
	{ J_NO_FDS, 1, 0, 0 },
	{ J_ONE_FD, 1, 0, 0 },
	{ J_FIVE_FDS, 1, 0, 0 },
	{ J_OTHER_ADDR, 1, 0, 0 },
	{ J_OTHER_PORT, 1, 0, 0 },
	/*
	 * The acceptor cannot use it and asks the agent; the connector's own
	 * offer goes unanswered, so it asks too: they meet, and the agent hands
	 * a new link. The server now holds that link and the connector's
	 * withdrawn offer (its bell and memfd) until it is old enough to go;
	 * the replaced link closes at the next drain (its EOF).
	 */
	{ J_PIPE_MEMFD, 0, 3, 0 },
	{ J_PIPE_MEMFD, 0, 5, 0 },
	{ J_NONE, 1, 4, 0 },
	/* Both are older than an acceptor keeps an offer: gone. */
	{ J_NONE, 1, 0, 1 },
};
#define ROUNDS	((int)(sizeof(rounds) / sizeof(rounds[0])))

static void exchange(int fd, int r, int client)
{
	const char *who = client ? "client" : "server";

	if (client)
		CHECK(t_send_stream(fd, N, (uint8_t)r) == 0, "round %d: %s send", r, who);
	CHECK(t_recv_stream(fd, N, (uint8_t)(client ? 100 + r : r)) == 0,
	      "round %d: %s receive: data lost or corrupted", r, who);
	if (!client)
		CHECK(t_send_stream(fd, N, (uint8_t)(100 + r)) == 0, "round %d: %s send", r, who);
}

static int server(int ctl)
{
	uint16_t port;
	int lfd = t_listen(AF_INET, &port), base = 0;

	CHECK(write(ctl, &port, sizeof(port)) == sizeof(port), "port");
	for (int r = 0; r < ROUNDS; r++) {
		int fd = accept(lfd, NULL, NULL), n;

		CHECK(fd >= 0, "round %d: accept: %s", r, strerror(errno));
		/* Every round ends on shm: over the link, or from the agent. */
		CHECK(t_swapped(fd), "round %d: server end not swapped", r);
		exchange(fd, r, 0);
		close(fd);
		n = t_count_fds();
		if (r == 0)
			base = n;	/* the listener and the link */
		CHECK(rounds[r].held ? n <= base + rounds[r].held : n == base,
		      "round %d: the server holds %d fds: %d after the first connection, %d more "
		      "allowed now", r, n, base, rounds[r].held);
		/* Back in accept() next: an offer waits 5 ms at most for it (link.c). */
		CHECK(write(ctl, "r", 1) == 1, "round %d: ready", r);
	}
	close(lfd);
	return t_exit_code();
}

/* The IPv4 endpoint (address, then port, network order) of 127.0.0.x:port. */
static void ep(uint8_t out[FF_EP4_LEN], uint8_t x, uint16_t port)
{
	uint16_t p = htons(port);

	memcpy(out, (uint8_t[]){ 127, 0, 0, x }, 4);
	memcpy(out + 4, &p, 2);
}

/* A LINK_OFFER for 127.0.0.conn:cport -> 127.0.0.1:aport into buf; its size. */
static int offer(uint8_t *buf, size_t cap, uint8_t conn, uint16_t cport, uint16_t aport)
{
	uint8_t c[FF_EP4_LEN], a[FF_EP4_LEN];
	struct ff_enc e;

	ep(c, conn, cport);
	ep(a, 1, aport);
	ff_enc_start(&e, buf, cap, FF_MSG_LINK_OFFER, 0);
	ff_enc_attr(&e, FF_ATTR_LOCAL_EP, c, sizeof(c));
	ff_enc_attr(&e, FF_ATTR_REMOTE_EP, a, sizeof(a));
	ff_enc_u32(&e, FF_ATTR_CHANNEL, 0);	/* a channel nobody keeps: the memfd comes along */
	return ff_enc_finish(&e);
}

/*
 * Write junk j over link, before a connection to port from local port own.
 * The offers name that very connection (all but J_OTHER_*), so that only
 * what each gets wrong can have it dropped.
 */
static void send_junk(int link, enum junk j, uint16_t port, uint16_t own)
{
	uint32_t ring = fa_shm_ring();
	uint8_t buf[4000];
	int fds[5], nfd = 0, sp[2], pp[2], n = 0;
	struct t_fds_msg m;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) || pipe2(pp, O_CLOEXEC)) {
		CHECK(0, "socketpair or pipe: %s", strerror(errno));
		return;
	}
	/* A bell end and a good channel, unless the case gets them wrong. */
	fds[0] = sp[1];
	fds[1] = fa_memfd(ring, FF_SHM_MAGIC, FA_SHM_BYTES(ring), FA_SEALS);
	for (int i = 2; i < 5; i++)
		fds[i] = sp[0];
	switch (j) {
	case J_NONE:
		break;
	case J_RANDOM:
	case J_TOO_LONG:
		n = j == J_RANDOM ? 100 : (int)sizeof(buf);
		for (int i = 0; i < n; i++)
			buf[i] = t_byte((uint64_t)i, (uint8_t)j);
		break;
	case J_NO_FDS:
	case J_ONE_FD:
	case J_FIVE_FDS:
		n = offer(buf, sizeof(buf), 1, own, port);
		nfd = j == J_NO_FDS ? 0 : j == J_ONE_FD ? 1 : 5;
		break;
	case J_OTHER_ADDR:
	case J_OTHER_PORT:
		n = offer(buf, sizeof(buf), j == J_OTHER_ADDR ? 2 : 1, own,
			  j == J_OTHER_PORT ? (uint16_t)(port + 1) : port);
		nfd = 2;
		break;
	case J_PIPE_MEMFD:
		n = offer(buf, sizeof(buf), 1, own, port);
		fds[1] = pp[0];
		nfd = 2;
		break;
	}
	if (n > 0 && t_fds_msg(&m, buf, (size_t)n, fds, nfd) == 0)
		CHECK(sendmsg(link, &m.mh, MSG_NOSIGNAL) == n, "junk %d over the link: %s", j,
		      strerror(errno));
	if (fds[1] != pp[0])
		close(fds[1]);
	close(sp[0]);
	close(sp[1]);
	close(pp[0]);
	close(pp[1]);
}

/* A socket bound to 127.0.0.1 and a port of its own, in *own. */
static int bound_socket(uint16_t *own)
{
	struct sockaddr_storage ss;
	socklen_t len = t_addr(AF_INET, &ss, 0);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	CHECK(fd >= 0 && bind(fd, (void *)&ss, len) == 0, "bind: %s", strerror(errno));
	len = sizeof(ss);
	getsockname(fd, (void *)&ss, &len);
	*own = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	return fd;
}

int main(int argc, char **argv)
{
	struct sockaddr_storage ss;
	int ctl, link = -1;
	uint16_t port;
	pid_t pid;

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	port = t_fork_server(server, &ctl, &pid);
	for (int r = 0; r < ROUNDS; r++) {
		int asks = t_agent_count("ask"), opened = t_ledger_ends(0), fd;
		socklen_t len = t_addr(AF_INET, &ss, port);
		uint16_t own;

		char ready;

		CHECK(r == 0 || read(ctl, &ready, 1) == 1, "round %d: the server never got ready", r);
		if (rounds[r].later)
			usleep((PENDING_KEEP_MS + T_SLACK_MS) * 1000);
		fd = bound_socket(&own);
		if (rounds[r].junk != J_NONE) {
			CHECK(t_link_fds(&link, 1) == 1, "round %d: no link to write junk to", r);
			send_junk(link, rounds[r].junk, port, own);
		}
		CHECK(connect(fd, (void *)&ss, len) == 0, "round %d: connect: %s", r,
		      strerror(errno));
		CHECK(t_swapped(fd), "round %d: client end not swapped", r);
		exchange(fd, r, 1);
		close(fd);
		if (r == 0)
			continue;
		/*
		 * Over the link nobody asks. Where the acceptor took the forged offer
		 * (and could not use it), the connector's own went unanswered: both ask.
		 */
		CHECK(t_agent_count("ask") == asks + 2 * !rounds[r].linked, "round %d: %d asks, not %d",
		      r, t_agent_count("ask") - asks, 2 * !rounds[r].linked);
		if (rounds[r].linked)
			CHECK(t_ledger_await(0, opened + 2) == opened + 2,
			      "round %d: %d linked ends, not 2", r, t_ledger_ends(0) - opened);
	}
	t_wait_child(pid, "server");
	CHECK(t_agent_count("swap") == 3, "%d swaps by the agent, not 3 (the first, the two with a pipe)",
	      t_agent_count("swap"));
	return t_shim_finish();
}
