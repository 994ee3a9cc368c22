/* SPDX-License-Identifier: MIT */
/*
 * A fake agent for the shim tests: the brokering rules of PROTOCOL.md
 * ("Connection brokering") on a temporary SOCK_SEQPACKET socket, run in a
 * forked child of the test.
 *
 * FA_BROKER: LISTEN/UNLISTEN get OK, CLOSED nothing (a notification). A
 *   CONNECT/ACCEPT is keyed by the connection's 4-tuple (connecting end
 *   first); the decision is made
 *   once per tuple: CONNECT to a port no listener registered gets overlay
 *   (listener-not-freeflow) at once; otherwise the first ask waits at most
 *   FA_WAIT_MS for the other end, then both get one end of a new channel,
 *   or the waiting one gets overlay (peer-timeout). A late ask gets the
 *   recorded decision.
 * FA_OVERLAY: every CONNECT/ACCEPT gets PATH overlay at once.
 * FA_SILENT: accepts connections, never answers anything.
 * FA_LIMIT: answers every HELLO with ERROR LIMIT and closes the session, as
 *   an agent does to a container at its session limit.
 * FA_HOSTILE: every CONNECT/ACCEPT gets a broken PATH at once; the k-th
 *   tuple gets case k % FA_HOSTILE_CASES (enum fa_hostile), both of its
 *   ends the same one.
 *
 * The channel (FF_TEST_CHANNEL in the environment, as the test runner sets
 * it): "unix" (default) hands the two ends of a socketpair(AF_UNIX,
 * SOCK_STREAM) with PATH unix, as an agent does on one host; "host-tcp"
 * hands the two ends of a real TCP connection on 127.0.0.1 with PATH
 * host-tcp, as two agents do across hosts; like the real agent (Go), the
 * fake sets TCP_NODELAY on them, so the tests see whether the library
 * restores the application's choice; "shm" hands each end [one end of a
 * socketpair (the bell socket), a sealed memfd laid out as docs/SHM.md
 * says] with PATH shm, if both ends' HELLO said CAPS bit 0 (as the agent
 * requires), else a unix channel. Rings are FF_TEST_SHM_RING bytes (default
 * 16 MiB, as the agent's); the memfd is named "ff-shm", which t_swapped looks for.
 * "shm-link" is "shm" plus a link with every shm channel whose two ends
 * said CAPS bit 1 (one end of a socketpair(AF_UNIX, SOCK_SEQPACKET) each,
 * LINK_TTL FF_TEST_LINK_TTL ms, default 2000), so that the ends' later
 * connections are set up over the link, as docs/PROTOCOL.md ("Links") says;
 * with FF_TEST_LINK_ONCE set, only the first such channel gets a link.
 * "host-tcp-link" is "host-tcp" plus a cross-host link with every channel
 * whose two ends said CAPS bit 2 ("Cross-host links"): the acceptor gets a
 * link listener on 127.0.0.1 and the token, the connector the link's name
 * and the token (a wrong one if FF_TEST_XLINK_TOKEN=bad), and LINK_FILL
 * dials stock connections to that listener.
 *
 * Every event is one line in the log file ("hello", "ask", "swap", "swap
 * shm link", "swap xlink", "fill <count>", "fill refused", "overlay <reason>", "hostile <case>", "listen <pid>",
 * "unlisten", "closed", "ledger <fd>" or "ledger refused"), which the
 * tests read to check what really happened. When its parent dies without stopping it (a crash, the
 * runner's timeout), the agent removes the test's temporary directory.
 */
#ifndef FREEFLOW_FAKE_AGENT_H
#define FREEFLOW_FAKE_AGENT_H

#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "freeflow/proto.h"
#include "freeflow/ledger_layout.h"
#include "freeflow/shm_layout.h"
#include "fake_verbs.h"
#include "testutil.h"

#define FA_WAIT_MS	50
#define FA_MAX_CLIENTS	64
#define FA_MAX_TUPLES	512
/* Client fds of the agent whose HELLO is remembered. */
#define FA_MAX_FD	1024
/* The agent's ring size (internal/agent/shm.go, shmRingSize). */
#define FA_SHM_RING_DEFAULT	(16u << 20)
#define FA_MAX_XLINKS	64

enum fa_mode { FA_BROKER, FA_OVERLAY, FA_SILENT, FA_HOSTILE, FA_LIMIT };

/* What FA_HOSTILE gets wrong; every one must leave the connection on TCP. */
enum fa_hostile {
	FA_WRONG_SEQ,		/* PATH unix with a good fd, for another seq */
	FA_NO_FD,		/* PATH unix without an fd */
	FA_NOT_STREAM,		/* PATH unix with a UDP socket */
	FA_TWO_FDS,		/* PATH unix with two stream sockets */
	FA_KIND_RANGE,		/* PATH_KIND 9 with a stream socket */
	FA_KIND_SHM,		/* PATH shm with a stream socket only, no memfd */
	FA_OVERLAY_FD,		/* PATH overlay, yet with a stream socket */
	FA_SHM_UNSEALED,	/* PATH shm whose memfd has no seals */
	FA_SHM_SIZE,		/* PATH shm whose memfd is a page larger than the header says */
	FA_SHM_MAGIC,		/* PATH shm whose memfd's magic is wrong */
	FA_SHM_RING,		/* PATH shm with ring_size 12 KiB, not a power of two */
	FA_SHM_ORDER,		/* PATH shm with [memfd, bell socket] */
	FA_SHM_NOT_MEMFD,	/* PATH shm with [bell socket, another socket] */
	FA_HOSTILE_CASES
};

static const char *const fa_hostile_name[FA_HOSTILE_CASES] = {
	"wrong-seq", "no-fd", "not-stream", "two-fds", "kind-range", "kind-shm", "overlay-fd",
	"shm-unsealed", "shm-size", "shm-magic", "shm-ring", "shm-order", "shm-not-memfd",
};

struct fa_tuple {
	uint8_t key[36];
	uint8_t keylen;
	int8_t decided;		/* -1 waiting, else enum ff_path_kind */
	int waiter;		/* waiting client fd, or -1 */
	int asker_connects;	/* the ask that decides it came from the connector */
	uint32_t seq;
	int64_t deadline;
};

struct fa_state {
	enum fa_mode mode;
	int logfd;
	struct pollfd p[FA_MAX_CLIENTS + 1];
	int n;
	struct fa_tuple t[FA_MAX_TUPLES];
	int nt;
	uint16_t ports[64];	/* registered listener ports, network order */
	int nports;
	uint8_t caps[FA_MAX_FD];	/* the client's HELLO's CAPS */
	struct {
		uint16_t port;		/* the link listener's, network order */
		uint8_t token[FF_TOKEN_LEN];
	} xl[FA_MAX_XLINKS];		/* a link's name is its index + 1 */
	int nxl;
	int links;			/* same-host links granted */
	/* Parking (FF_TEST_PARK_MS): the processes' WATCH sessions, and the parks planned. */
	struct {
		int pid, fd;
		uint32_t seq;
		int waiting;		/* its WATCH is not answered yet */
	} watch[16];
	int nwatch;
	struct fa_park {
		uint8_t conn[18], acc[18];
		uint8_t conn_len, acc_len;
		int pid_conn, pid_acc;
		int64_t at;		/* when to park; 0 once handed to the connector */
		int acc_sock;		/* the acceptor's end, handed once the connector answered */
		int answered;		/* the connector said parked */
		int64_t acc_at;		/* then the acceptor's end goes at this time (FF_TEST_PARK_PEER_MS later) */
	} park[8];
	int npark;
	/* Back to shm (FF_TEST_RESUME_MS): each shm channel's ends are offered a new one, both at once. */
	struct fa_resume {
		uint8_t conn[6], acc[6];
		int pid_conn, pid_acc;
		int64_t at;		/* when to offer next; 0 once it moved */
		int asked, moved;	/* RESUMEs out, and ends that said they moved */
		int64_t conn_at;	/* FF_TEST_RESUME_LAG_MS: the connector's goes then; 0 sent */
		int conn_fds[2];	/* what it carries meanwhile */
	} resume[8];
	int nresume;
};

static inline int64_t fa_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void fa_log(struct fa_state *st, const char *fmt, ...)
{
	char line[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	line[n++] = '\n';
	if (write(st->logfd, line, (size_t)n) < 0)
		_exit(3);
}

static inline uint32_t fa_link_ttl(void)
{
	const char *v = getenv("FF_TEST_LINK_TTL");

	return v ? (uint32_t)strtoul(v, NULL, 0) : 2000;
}

/* Send a reply with nfd fds (0 to 3) from passfd; a third is a link (LINK_TTL). */
static inline void fa_send_fds(int fd, uint8_t type, uint32_t seq, int kind,
			       const char *reason, const int *passfd, int nfd)
{
	uint8_t buf[256];
	struct ff_enc e;

	ff_enc_start(&e, buf, sizeof(buf), type, seq);
	if (type == FF_MSG_HELLO_REPLY) {
		ff_enc_str(&e, FF_ATTR_AGENT_VERSION, "fake-agent");
		ff_enc_str(&e, FF_ATTR_CONTAINER_ID, "c-test");
		ff_enc_str(&e, FF_ATTR_NAME, "test");
		ff_enc_attr(&e, FF_ATTR_IP, "\x7f\x00\x00\x01", 4);
		ff_enc_str(&e, FF_ATTR_TENANT, "t");
		ff_enc_str(&e, FF_ATTR_HOST, "h");
	}
	if (type == FF_MSG_PATH) {
		ff_enc_u8(&e, FF_ATTR_PATH_KIND, (uint8_t)kind);
		if (reason)
			ff_enc_str(&e, FF_ATTR_REASON, reason);
		if (nfd == 3)
			ff_enc_u32(&e, FF_ATTR_LINK_TTL, fa_link_ttl());
	}
	t_send_fds(fd, buf, (size_t)ff_enc_finish(&e), passfd, nfd);
}

static inline void fa_send(int fd, uint8_t type, uint32_t seq, int kind, const char *reason,
			   int passfd)
{
	fa_send_fds(fd, type, seq, kind, reason, &passfd, passfd >= 0);
}

static inline int fa_host_tcp(void)
{
	const char *c = getenv("FF_TEST_CHANNEL");

	return c && (!strcmp(c, "host-tcp") || !strcmp(c, "host-tcp-link"));
}

static inline int fa_xlink(void)
{
	const char *c = getenv("FF_TEST_CHANNEL");

	return c && !strcmp(c, "host-tcp-link");
}

/*
 * The two ends of a TCP connection on 127.0.0.1, as two agents would make
 * between their hosts' fabric addresses; TCP_NODELAY on, as Go sets it.
 */
static inline int fa_tcp_pair(int sp[2])
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (l < 0 || bind(l, (void *)&a, sizeof(a)) || listen(l, 1) ||
	    getsockname(l, (void *)&a, &al))
		return -1;
	sp[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (sp[0] < 0 || connect(sp[0], (void *)&a, sizeof(a)))
		return -1;
	sp[1] = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	close(l);
	if (sp[1] < 0)
		return -1;
	setsockopt(sp[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(sp[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return 0;
}

/* "shm-link": shm channels, and a link with each (docs/PROTOCOL.md, "Links"). */
static inline int fa_link(void)
{
	const char *c = getenv("FF_TEST_CHANNEL");

	return c && !strcmp(c, "shm-link");
}

static inline int fa_shm(void)
{
	const char *c = getenv("FF_TEST_CHANNEL");

	return c && (!strcmp(c, "shm") || fa_link());
}

static inline uint32_t fa_shm_ring(void)
{
	const char *v = getenv("FF_TEST_SHM_RING");

	return v ? (uint32_t)strtoul(v, NULL, 0) : FA_SHM_RING_DEFAULT;
}

static inline void fa_put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/*
 * A memfd as docs/SHM.md lays it out: the header (magic, FF_SHM_VERSION,
 * ring_size), size bytes in all, with seals. The hostile cases pass what
 * to get wrong; a good one is fa_memfd(ring, FF_SHM_MAGIC, FA_SHM_BYTES(ring),
 * FA_SEALS).
 */
static inline int fa_memfd(uint32_t ring, uint32_t magic, uint64_t size, int seals)
{
	int fd = memfd_create("ff-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	uint8_t hdr[16] = { 0 };

	fa_put_le32(hdr, magic);
	fa_put_le32(hdr + 4, FF_SHM_VERSION);
	fa_put_le32(hdr + 8, ring);
	if (fd < 0 || ftruncate(fd, (off_t)size) || pwrite(fd, hdr, sizeof(hdr), 0) != sizeof(hdr) ||
	    (seals && fcntl(fd, F_ADD_SEALS, seals)))
		_exit(3);
	return fd;
}

#define FA_SEALS	(F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
/* The size of a channel's memfd with rings of ring bytes. */
#define FA_SHM_BYTES(ring)	(FF_SHM_HDR_SIZE + 2 * (uint64_t)(ring))

/*
 * A new channel for one connection: its two ends, its memfd (shm only,
 * else -1) and its PATH_KIND. shm_ok: both ends can take shm.
 */
static inline int fa_channel(int sp[2], int *memfd, int shm_ok)
{
	*memfd = -1;
	if (fa_host_tcp())
		return fa_tcp_pair(sp) ? -1 : FF_PATH_HOST_TCP;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp))
		return -1;
	if (!fa_shm() || !shm_ok) {
		/* Sized as the real agent sizes a unix channel (PROTOCOL.md), where it can. */
		int big = 16 << 20;

		for (int i = 0; i < 2; i++)
			setsockopt(sp[i], SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big));
		return FF_PATH_UNIX;
	}
	*memfd = fa_memfd(fa_shm_ring(), FF_SHM_MAGIC, FA_SHM_BYTES(fa_shm_ring()), FA_SEALS);
	return FF_PATH_SHM;
}

static inline int fa_can(struct fa_state *st, int fd, uint32_t cap)
{
	return fd >= 0 && fd < FA_MAX_FD && (st->caps[fd] & cap);
}

static inline struct fa_tuple *fa_find(struct fa_state *st, const uint8_t *key, int len)
{
	struct fa_tuple *t = NULL;

	for (int i = 0; i < st->nt; i++)
		if (st->t[i].keylen == len && !memcmp(st->t[i].key, key, (size_t)len))
			return &st->t[i];
	if (st->nt < FA_MAX_TUPLES)
		t = &st->t[st->nt++];
	else	/* full: forget a decided tuple, as the agent forgets them in time */
		for (int i = 0; i < st->nt && !t; i++)
			if (st->t[i].decided >= 0)
				t = &st->t[i];
	if (!t)
		return NULL;
	*t = (struct fa_tuple){ .keylen = (uint8_t)len, .decided = -1, .waiter = -1 };
	memcpy(t->key, key, (size_t)len);
	return t;
}

static inline int fa_port_registered(struct fa_state *st, const struct ff_attr *ep)
{
	uint16_t port;

	memcpy(&port, ep->val + ep->len - 2, 2);
	for (int i = 0; i < st->nports; i++)
		if (st->ports[i] == port)
			return 1;
	return 0;
}

/* A TCP listener on 127.0.0.1 (port in *port, network order), as an agent's link listener. */
static inline int fa_listener(uint16_t *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (l < 0 || bind(l, (void *)&a, sizeof(a)) || listen(l, 128) ||
	    getsockname(l, (void *)&a, &al))
		_exit(3);
	*port = a.sin_port;
	return l;
}

/*
 * A host-tcp channel sp ([connector's end, acceptor's end]) with a
 * cross-host link: the connector gets the link's name, the acceptor the
 * listener and the token.
 */
static inline void fa_xlink_grant(struct fa_state *st, int conn, int acc, uint32_t conn_seq,
				  uint32_t acc_seq, int sp[2])
{
	const char *bad = getenv("FF_TEST_XLINK_TOKEN");
	uint8_t buf[256], conn_token[FF_TOKEN_LEN];
	struct ff_enc e;
	int fds[2] = { sp[1], -1 }, n;

	if (st->nxl == FA_MAX_XLINKS)
		_exit(3);
	fds[1] = fa_listener(&st->xl[st->nxl].port);
	for (int i = 0; i < FF_TOKEN_LEN; i++)
		st->xl[st->nxl].token[i] = (uint8_t)rand();
	memcpy(conn_token, st->xl[st->nxl].token, FF_TOKEN_LEN);
	if (bad && !strcmp(bad, "bad"))	/* the connector's offers then carry a wrong token */
		conn_token[0] ^= 1;
	st->nxl++;
	fa_log(st, "swap xlink");
	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_PATH, conn_seq);
	ff_enc_u8(&e, FF_ATTR_PATH_KIND, FF_PATH_HOST_TCP);
	ff_enc_u32(&e, FF_ATTR_LINK_TTL, fa_link_ttl());
	ff_enc_u64(&e, FF_ATTR_LINK, (uint64_t)st->nxl);
	ff_enc_attr(&e, FF_ATTR_TOKEN, conn_token, FF_TOKEN_LEN);
	n = ff_enc_finish(&e);
	t_send_fds(conn, buf, (size_t)n, sp, 1);
	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_PATH, acc_seq);
	ff_enc_u8(&e, FF_ATTR_PATH_KIND, FF_PATH_HOST_TCP);
	ff_enc_u32(&e, FF_ATTR_LINK_TTL, fa_link_ttl());
	ff_enc_attr(&e, FF_ATTR_TOKEN, st->xl[st->nxl - 1].token, FF_TOKEN_LEN);
	n = ff_enc_finish(&e);
	t_send_fds(acc, buf, (size_t)n, fds, 2);
	close(sp[0]);
	close(sp[1]);
	close(fds[1]);
}

static inline void fa_error(int fd, uint32_t seq, uint32_t code)
{
	uint8_t buf[64];
	struct ff_enc e;

	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_ERROR, seq);
	ff_enc_u32(&e, FF_ATTR_ERR_CODE, code);
	t_send_fds(fd, buf, (size_t)ff_enc_finish(&e), NULL, 0);
}

static inline void fa_fill_refused(struct fa_state *st, int fd, uint32_t seq)
{
	fa_log(st, "fill refused");
	fa_error(fd, seq, FF_ERR_NOTFOUND);
}

/* LINK_FILL: dial the stock to the link's listener. */
static inline void fa_fill(struct fa_state *st, int fd, const struct ff_msg *m)
{
	const struct ff_attr *name = ff_msg_get(m, FF_ATTR_LINK), *count = ff_msg_get(m, FF_ATTR_COUNT);
	uint64_t k = name ? ff_attr_u64(name) : 0;
	uint32_t n = count ? ff_attr_u32(count) : 0;
	uint8_t buf[64];
	struct sockaddr_in a = { .sin_family = AF_INET };
	int fds[16];
	struct ff_enc e;

	if (!k || k > (uint64_t)st->nxl || !st->xl[k - 1].port || n < 1 || n > 16) {
		fa_fill_refused(st, fd, m->seq);
		return;
	}
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = st->xl[k - 1].port;
	for (uint32_t i = 0; i < n; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fds[i] < 0)
			_exit(3);
		if (connect(fds[i], (void *)&a, sizeof(a))) {
			/* The acceptor closed its listener: the link is over, as the agent says. */
			for (uint32_t j = 0; j <= i; j++)
				close(fds[j]);
			st->xl[k - 1].port = 0;
			fa_fill_refused(st, fd, m->seq);
			return;
		}
	}
	fa_log(st, "fill %u", n);
	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_PATH, m->seq);
	ff_enc_u8(&e, FF_ATTR_PATH_KIND, FF_PATH_HOST_TCP);
	t_send_fds(fd, buf, (size_t)ff_enc_finish(&e), fds, (int)n);
	for (uint32_t i = 0; i < n; i++)
		close(fds[i]);
}

/*
 * Parking (docs/PROTOCOL.md, "Parking"): with FF_TEST_PARK_MS set, every shm
 * channel is parked that long after it is made, as the agent does for a
 * migration: a TCP connection at the tuple made in repair mode (root: the
 * tests run so), the connector's end handed first, the acceptor's once the
 * connector answered it parked (FF_TEST_PARK_PEER_MS later, if set), marked
 * as the peer's (FOUND 1); a connector that did not park gets the
 * acceptor's socket closed.
 */
static inline int fa_peer_pid(int fd);

static inline int fa_park_ms(void)
{
	const char *v = getenv("FF_TEST_PARK_MS");

	return v ? atoi(v) : 0;
}

static inline void fa_sin(struct sockaddr_in *sa, const uint8_t *ep)
{
	*sa = (struct sockaddr_in){ .sin_family = AF_INET };
	memcpy(&sa->sin_addr, ep, 4);
	memcpy(&sa->sin_port, ep + 4, 2);
}

/* One end in repair mode, local -> remote (6-byte endpoints), its sequence numbers snd and rcv. */
static inline int fa_repaired(const uint8_t *local, const uint8_t *remote, int snd, int rcv)
{
	struct { uint32_t code, val; } o[] = {
		{ TCPOPT_MAXSEG, 1398 }, { TCPOPT_WINDOW, 10 | 10 << 16 },
		{ TCPOPT_SACK_PERMITTED, 0 }, { TCPOPT_TIMESTAMP, 0 },
	};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), on = 1, big = 32 << 20;
	struct sockaddr_in l, r;

	fa_sin(&l, local);
	fa_sin(&r, remote);
	if (fd < 0 || setsockopt(fd, IPPROTO_TCP, TCP_REPAIR, &on, sizeof(on)) ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big)) ||
	    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big)) ||
	    setsockopt(fd, IPPROTO_TCP, TCP_REPAIR_QUEUE, &(int){ TCP_SEND_QUEUE }, sizeof(int)) ||
	    setsockopt(fd, IPPROTO_TCP, TCP_QUEUE_SEQ, &snd, sizeof(snd)) ||
	    setsockopt(fd, IPPROTO_TCP, TCP_REPAIR_QUEUE, &(int){ TCP_RECV_QUEUE }, sizeof(int)) ||
	    setsockopt(fd, IPPROTO_TCP, TCP_QUEUE_SEQ, &rcv, sizeof(rcv)) ||
	    bind(fd, (void *)&l, sizeof(l)) || connect(fd, (void *)&r, sizeof(r)) ||
	    setsockopt(fd, IPPROTO_TCP, TCP_REPAIR_OPTIONS, o, sizeof(o)))
		_exit(3);
	return fd;
}

static inline int fa_watcher(struct fa_state *st, int pid)
{
	for (int i = 0; i < st->nwatch; i++)
		if (st->watch[i].pid == pid && st->watch[i].waiting)
			return i;
	return -1;
}

/* PARK to watcher w: the connection local -> remote, sock its end (closed here); adopt: the peer's end. */
static inline void fa_park_send(struct fa_state *st, int w, const uint8_t *local, uint8_t ll,
				const uint8_t *remote, uint8_t rl, int sock, int adopt)
{
	uint8_t buf[128];
	struct ff_enc e;

	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_PARK, st->watch[w].seq);
	ff_enc_attr(&e, FF_ATTR_LOCAL_EP, local, ll);
	ff_enc_attr(&e, FF_ATTR_REMOTE_EP, remote, rl);
	if (adopt)
		ff_enc_u8(&e, FF_ATTR_FOUND, 1);
	t_send_fds(st->watch[w].fd, buf, (size_t)ff_enc_finish(&e), &sock, 1);
	close(sock);
	st->watch[w].waiting = 0;
	fa_log(st, "park");
}

/* The parks due: the pair made, the connector's end handed; the acceptor's once it answered. The ms to the next, or 100. */
static inline int fa_park_due(struct fa_state *st)
{
	int64_t now = fa_now(), next = 100;

	for (int i = 0; i < st->npark; i++) {
		struct fa_park *p = &st->park[i];
		int wc, wa, a, b, off = 0;

		if (!p->at) {
			int due = p->acc_sock >= 0 && p->answered && p->acc_at <= now;

			wa = due ? fa_watcher(st, p->pid_acc) : -1;
			if (wa >= 0) {
				fa_park_send(st, wa, p->acc, p->acc_len, p->conn, p->conn_len, p->acc_sock, 1);
				p->acc_sock = -1;
			} else if (p->acc_sock >= 0 && p->answered) {
				int64_t wait = p->acc_at > now ? p->acc_at - now : 10;

				next = wait < next ? wait : next;
			}
			continue;
		}
		wc = fa_watcher(st, p->pid_conn);
		if (p->at > now || wc < 0) {
			int64_t wait = p->at > now ? p->at - now : 10;

			next = wait < next ? wait : next;
			continue;
		}
		a = fa_repaired(p->conn, p->acc, 1000, 5000);
		b = fa_repaired(p->acc, p->conn, 5000, 1000);
		if (setsockopt(a, IPPROTO_TCP, TCP_REPAIR, &off, sizeof(off)) ||
		    setsockopt(b, IPPROTO_TCP, TCP_REPAIR, &off, sizeof(off)))
			_exit(3);
		p->at = 0;
		p->acc_sock = b;
		fa_park_send(st, wc, p->conn, p->conn_len, p->acc, p->acc_len, a, 0);
	}
	return (int)next;
}

/*
 * Back to shm (docs/PROTOCOL.md, "Back to shared memory"): with
 * FF_TEST_RESUME_MS set, every shm channel's two ends are sent RESUME with a
 * new channel, both at once once both wait in WATCH, that long after it is
 * made and again as long after each try that did not move both; once it was
 * parked (FF_TEST_PARK_MS), each end also gets one end of a new bell. With
 * FF_TEST_RESUME_LAG_MS the connector's goes that much after the
 * acceptor's. The agent's own checks (a moved-down pair, its second holder
 * gone, a parked one's ends on one host) are the test's.
 */
static inline int fa_resume_ms(void)
{
	const char *v = getenv("FF_TEST_RESUME_MS");

	return v ? atoi(v) : 0;
}

/* RESUME to watcher w: the new channel's memfd, and for a parked connection this end's bell (else -1). */
static inline void fa_resume_send(struct fa_state *st, int w, const uint8_t *local, const uint8_t *remote,
				  uint8_t role, int memfd, int bell)
{
	int fds[2] = { memfd, bell };
	uint8_t buf[128];
	struct ff_enc e;

	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_RESUME, st->watch[w].seq);
	ff_enc_attr(&e, FF_ATTR_LOCAL_EP, local, 6);
	ff_enc_attr(&e, FF_ATTR_REMOTE_EP, remote, 6);
	ff_enc_u8(&e, FF_ATTR_ROLE, role);
	t_send_fds(st->watch[w].fd, buf, (size_t)ff_enc_finish(&e), fds, bell >= 0 ? 2 : 1);
	st->watch[w].waiting = 0;
	fa_log(st, "resume");
}

/* Whether the connection conn -> acc was parked at both ends (both handed their sockets). */
static inline int fa_parked(const struct fa_state *st, const uint8_t *conn, const uint8_t *acc)
{
	for (int i = 0; i < st->npark; i++) {
		const struct fa_park *p = &st->park[i];

		if (!p->at && p->answered && p->acc_sock < 0 && p->conn_len == 6 && !memcmp(p->conn, conn, 6) &&
		    !memcmp(p->acc, acc, 6))
			return 1;
	}
	return 0;
}

/* The RESUMEs due; the ms to the next, or 100. */
static inline int fa_resume_due(struct fa_state *st)
{
	int64_t now = fa_now(), next = 100;

	for (int i = 0; i < st->nresume; i++) {
		struct fa_resume *r = &st->resume[i];
		int wc, wa, memfd, bell[2] = { -1, -1 };
		const char *lag = getenv("FF_TEST_RESUME_LAG_MS");

		wc = fa_watcher(st, r->pid_conn);
		wa = fa_watcher(st, r->pid_acc);
		if (r->conn_at && r->conn_at <= now && wc >= 0) {
			fa_resume_send(st, wc, r->conn, r->acc, FF_SHM_CONNECTOR, r->conn_fds[0], r->conn_fds[1]);
			for (int k = 0; k < 2; k++)
				if (r->conn_fds[k] >= 0)
					close(r->conn_fds[k]);
			r->conn_at = 0;
		} else if (r->conn_at) {
			next = r->conn_at > now && r->conn_at - now < next ? r->conn_at - now : next;
		}
		if (!r->at || r->asked)
			continue;
		if (r->at > now || wc < 0 || wa < 0 || (wc == wa && r->pid_conn == r->pid_acc)) {
			int64_t wait = r->at > now ? r->at - now : 10;

			next = wait < next ? wait : next;
			continue;
		}
		memfd = fa_memfd(fa_shm_ring(), FF_SHM_MAGIC, FA_SHM_BYTES(fa_shm_ring()), FA_SEALS);
		if (memfd < 0)
			_exit(3);
		if (fa_parked(st, r->conn, r->acc) && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, bell))
			_exit(3);
		fa_resume_send(st, wa, r->acc, r->conn, FF_SHM_ACCEPTOR, memfd, bell[1]);
		if (bell[1] >= 0)
			close(bell[1]);
		if (lag && atoi(lag) > 0) {
			r->conn_fds[0] = memfd;
			r->conn_fds[1] = bell[0];
			r->conn_at = now + atoi(lag);
			next = atoi(lag) < next ? atoi(lag) : next;
		} else {
			fa_resume_send(st, wc, r->conn, r->acc, FF_SHM_CONNECTOR, memfd, bell[0]);
			close(memfd);
			if (bell[0] >= 0)
				close(bell[0]);
		}
		r->asked = 2;
		r->moved = 0;
	}
	return (int)next;
}

/* A WATCH of pid answering (found) the RESUME before it. */
static inline void fa_resume_answered(struct fa_state *st, int pid, int found)
{
	for (int i = 0; i < st->nresume; i++) {
		struct fa_resume *r = &st->resume[i];

		if (!r->asked || (r->pid_conn != pid && r->pid_acc != pid))
			continue;
		r->asked--;
		r->moved += found;
		if (!r->asked)
			r->at = r->moved == 2 ? 0 : fa_now() + fa_resume_ms();
		return;
	}
}

/* WATCH: the answer to the PARK before it, logged; the acceptor's end goes once the connector answered. */
static inline void fa_watch(struct fa_state *st, int fd, const struct ff_msg *m)
{
	const struct ff_attr *found = ff_msg_get(m, FF_ATTR_FOUND);
	int pid = fa_peer_pid(fd), w = -1;

	if (found)
		fa_log(st, ff_attr_u8(found) ? "watch parked" : "watch not-parked");
	else
		fa_log(st, "watch");
	for (int i = 0; i < st->nwatch; i++)
		if (st->watch[i].pid == pid)
			w = i;
	if (w < 0 && st->nwatch < (int)(sizeof(st->watch) / sizeof(st->watch[0])))
		w = st->nwatch++;
	if (w < 0)
		return;
	st->watch[w].pid = pid;
	st->watch[w].fd = fd;
	st->watch[w].seq = m->seq;
	st->watch[w].waiting = 1;
	if (found && st->nresume)
		fa_resume_answered(st, pid, ff_attr_u8(found));
	/* The connector's answer: its peer's end goes (fa_park_due), or is dropped if it did not park. */
	for (int i = 0; found && i < st->npark; i++) {
		struct fa_park *p = &st->park[i];

		if (p->acc_sock < 0 || p->answered || p->pid_conn != pid)
			continue;
		if (ff_attr_u8(found)) {
			const char *d = getenv("FF_TEST_PARK_PEER_MS");

			p->answered = 1;
			p->acc_at = fa_now() + (d ? atoi(d) : 0);
		} else {
			close(p->acc_sock);
			p->acc_sock = -1;
		}
		break;
	}
	if (st->npark)
		fa_park_due(st);
	if (st->nresume)
		fa_resume_due(st);
}

static inline void fa_decide(struct fa_state *st, struct fa_tuple *t, int fd, uint32_t seq,
		      int kind, const char *reason)
{
	t->decided = (int8_t)kind;
	if (kind == FF_PATH_OVERLAY) {
		fa_log(st, "overlay %s", reason);
		if (t->waiter >= 0)
			fa_send(t->waiter, FF_MSG_PATH, t->seq, kind, reason, -1);
		if (fd >= 0)
			fa_send(fd, FF_MSG_PATH, seq, kind, reason, -1);
	} else {
		int sp[2], memfd, a[3], b[3], lk[2] = { -1, -1 }, nfd;

		kind = fa_channel(sp, &memfd, fa_can(st, t->waiter, FF_CAP_SHM) &&
						 fa_can(st, fd, FF_CAP_SHM));
		if (kind < 0)
			_exit(3);
		if (kind == FF_PATH_HOST_TCP && fa_xlink() && fa_can(st, t->waiter, FF_CAP_XLINK) &&
		    fa_can(st, fd, FF_CAP_XLINK)) {
			fa_xlink_grant(st, t->asker_connects ? fd : t->waiter,
				       t->asker_connects ? t->waiter : fd, t->asker_connects ? seq : t->seq,
				       t->asker_connects ? t->seq : seq, sp);
			t->keylen = 0;
			t->waiter = -1;
			return;
		}
		/* FF_TEST_LINK_ONCE: one link only, as an agent refuses more once another process accepted. */
		if (kind == FF_PATH_SHM && fa_link() && fa_can(st, t->waiter, FF_CAP_LINK) &&
		    fa_can(st, fd, FF_CAP_LINK) && !(getenv("FF_TEST_LINK_ONCE") && st->links)) {
			if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, lk))
				_exit(3);
			st->links++;
		}
		fa_log(st, kind != FF_PATH_SHM ? "swap" : lk[0] >= 0 ? "swap shm link" : "swap shm");
		if (kind == FF_PATH_SHM && fa_park_ms() && t->keylen == 12 &&
		    st->npark < (int)(sizeof(st->park) / sizeof(st->park[0]))) {
			struct fa_park *p = &st->park[st->npark++];

			memcpy(p->conn, t->key, 6);
			memcpy(p->acc, t->key + 6, 6);
			p->conn_len = p->acc_len = 6;
			p->pid_conn = fa_peer_pid(t->asker_connects ? fd : t->waiter);
			p->pid_acc = fa_peer_pid(t->asker_connects ? t->waiter : fd);
			p->at = fa_now() + fa_park_ms();
			p->acc_sock = -1;
			p->answered = 0;
		}
		if (kind == FF_PATH_SHM && fa_resume_ms() && t->keylen == 12 &&
		    st->nresume < (int)(sizeof(st->resume) / sizeof(st->resume[0]))) {
			struct fa_resume *r = &st->resume[st->nresume++];

			memcpy(r->conn, t->key, 6);
			memcpy(r->acc, t->key + 6, 6);
			r->pid_conn = fa_peer_pid(t->asker_connects ? fd : t->waiter);
			r->pid_acc = fa_peer_pid(t->asker_connects ? t->waiter : fd);
			r->at = fa_now() + fa_resume_ms();
			r->asked = r->moved = 0;
			r->conn_at = 0;
		}
		a[0] = sp[0];
		b[0] = sp[1];
		a[1] = b[1] = memfd;
		a[2] = lk[0];
		b[2] = lk[1];
		nfd = memfd < 0 ? 1 : lk[0] < 0 ? 2 : 3;
		fa_send_fds(t->waiter, FF_MSG_PATH, t->seq, kind, NULL, a, nfd);
		fa_send_fds(fd, FF_MSG_PATH, seq, kind, NULL, b, nfd);
		for (int i = 0; i < 2; i++) {
			close(sp[i]);
			if (lk[i] >= 0)
				close(lk[i]);
		}
		if (memfd >= 0)
			close(memfd);
		/*
		 * Both ends have their answer, so no late ask can come: forget
		 * the 4-tuple (a key no ask matches), as the overlay socket's
		 * port may now be reused by a new connection.
		 */
		t->keylen = 0;
	}
	t->waiter = -1;
}

/* FA_HOSTILE: the broken reply of case h to one ask. */
static inline void fa_hostile(struct fa_state *st, int fd, uint32_t seq, enum fa_hostile h)
{
	const uint32_t ring = FF_SHM_RING_MIN;
	const uint64_t size = FA_SHM_BYTES(ring);
	int sp[2], fds[2], kind = FF_PATH_UNIX, nfd = 1, memfd = -1;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp))
		_exit(3);
	fds[0] = sp[0];
	fds[1] = sp[1];
	switch (h) {
	case FA_WRONG_SEQ:	seq++; break;
	case FA_NO_FD:		nfd = 0; break;
	case FA_NOT_STREAM:	fds[0] = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0); break;
	case FA_TWO_FDS:	nfd = 2; break;
	case FA_KIND_RANGE:	kind = 9; break;
	case FA_KIND_SHM:	kind = FF_PATH_SHM; break;
	case FA_OVERLAY_FD:	kind = FF_PATH_OVERLAY; break;
	case FA_SHM_UNSEALED:	memfd = fa_memfd(ring, FF_SHM_MAGIC, size, 0); break;
	case FA_SHM_SIZE:	memfd = fa_memfd(ring, FF_SHM_MAGIC, size + 4096, FA_SEALS); break;
	case FA_SHM_MAGIC:	memfd = fa_memfd(ring, FF_SHM_MAGIC + 1, size, FA_SEALS); break;
	case FA_SHM_RING:	memfd = fa_memfd(3 * ring, FF_SHM_MAGIC, FA_SHM_BYTES(3 * ring), FA_SEALS); break;
	case FA_SHM_ORDER:	memfd = fa_memfd(ring, FF_SHM_MAGIC, size, FA_SEALS); break;
	case FA_SHM_NOT_MEMFD:	break;
	default:		_exit(3);
	}
	if (h >= FA_SHM_UNSEALED) {
		kind = FF_PATH_SHM;
		nfd = 2;
		if (memfd >= 0)
			fds[1] = memfd;
		if (h == FA_SHM_ORDER) {
			fds[0] = memfd;
			fds[1] = sp[0];
		}
	}
	fa_log(st, "hostile %s", fa_hostile_name[h]);
	fa_send_fds(fd, FF_MSG_PATH, seq, kind, NULL, fds, nfd);
	if (fds[0] != sp[0] && fds[0] != memfd)
		close(fds[0]);
	if (memfd >= 0)
		close(memfd);
	close(sp[0]);
	close(sp[1]);
}

/* CONNECT or ACCEPT: the brokering rules. */
static inline void fa_broker(struct fa_state *st, int fd, const struct ff_msg *m)
{
	const struct ff_attr *l = ff_msg_get(m, FF_ATTR_LOCAL_EP);
	const struct ff_attr *r = ff_msg_get(m, FF_ATTR_REMOTE_EP);
	const struct ff_attr *first, *second;
	uint8_t key[36];
	struct fa_tuple *t;

	if (!l || !r)
		_exit(4);
	first = m->type == FF_MSG_CONNECT ? l : r;
	second = m->type == FF_MSG_CONNECT ? r : l;
	memcpy(key, first->val, first->len);
	memcpy(key + first->len, second->val, second->len);
	t = fa_find(st, key, first->len + second->len);
	fa_log(st, "ask");
	if (t && st->mode == FA_HOSTILE) {
		fa_hostile(st, fd, m->seq, (enum fa_hostile)((t - st->t) % FA_HOSTILE_CASES));
	} else if (!t || st->mode == FA_OVERLAY) {
		fa_send(fd, FF_MSG_PATH, m->seq, FF_PATH_OVERLAY, "fake-says-overlay", -1);
		fa_log(st, "overlay fake-says-overlay");
	} else if (t->decided >= 0) {
		fa_send(fd, FF_MSG_PATH, m->seq, FF_PATH_OVERLAY, "late", -1);
	} else if (m->type == FF_MSG_CONNECT && !fa_port_registered(st, second)) {
		fa_decide(st, t, fd, m->seq, FF_PATH_OVERLAY, "listener-not-freeflow");
	} else if (t->waiter >= 0 && t->waiter != fd) {
		t->asker_connects = m->type == FF_MSG_CONNECT;
		fa_decide(st, t, fd, m->seq, FF_PATH_UNIX, NULL);
	} else {
		t->waiter = fd;
		t->seq = m->seq;
		t->deadline = fa_now() + FA_WAIT_MS;
	}
}

/*
 * The pid that opened client connection fd (the real agent keys listeners
 * by it), as that process sees itself: the last field of NSpid, since the
 * tests run in a pid namespace below the agent's (shimtest.h).
 */
static inline int fa_peer_pid(int fd)
{
	struct ucred cr = { .pid = -1 };
	socklen_t len = sizeof(cr);
	char path[64], line[256];
	int pid = -1;
	FILE *f;

	getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len);
	snprintf(path, sizeof(path), "/proc/%d/status", (int)cr.pid);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f)) {
		char *p = strrchr(line, '\t');

		if (!strncmp(line, "NSpid:", 6) && p)
			pid = atoi(p + 1);
	}
	if (f)
		fclose(f);
	return pid;
}

/*
 * LEDGER: keep a memfd that is a ledger as docs/PROTOCOL.md describes it
 * (size, seals, header) open, and log its fd number, where the tests read
 * it (t_ledger_ends); close anything else.
 */
static inline void fa_ledger(struct fa_state *st, int lfd)
{
	const int seals = F_SEAL_SHRINK | F_SEAL_GROW;
	uint32_t hdr[4] = { 0 };
	struct stat sb;

	if (lfd >= 0 && !fstat(lfd, &sb) && pread(lfd, hdr, sizeof(hdr), 0) == sizeof(hdr) &&
	    !memcmp(hdr, FF_LEDGER_MAGIC, 4) && hdr[1] == FF_LEDGER_VERSION && hdr[2] >= 1 && hdr[2] <= 65536 &&
	    hdr[3] == 128 && sb.st_size == 64 + 128 * (off_t)hdr[2] &&
	    (fcntl(lfd, F_GET_SEALS) & seals) == seals) {
		fa_log(st, "ledger %d", lfd);
		return;
	}
	fa_log(st, "ledger refused");
	if (lfd >= 0)
		close(lfd);
}

/* Close client fd and forget it. */
static inline void fa_drop(struct fa_state *st, int fd)
{
	fv_session_end(fd);
	close(fd);
	if (fd < FA_MAX_FD)
		st->caps[fd] = 0;
	for (int i = 0; i < st->nt; i++)
		if (st->t[i].waiter == fd)
			st->t[i].waiter = -1;
	for (int i = 0; i < st->nwatch; i++)
		if (st->watch[i].fd == fd)
			st->watch[i].waiting = 0;
	for (int i = 1; i < st->n; i++)
		if (st->p[i].fd == fd)
			st->p[i] = st->p[--st->n];
}

static inline void fa_request(struct fa_state *st, int fd)
{
	static uint8_t in[FF_MAX_MESSAGE];
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int) * FV_MAX_SEGS)];
	} ctl;
	int fds[FV_MAX_SEGS], nfds = 0;
	struct iovec iov = { in, sizeof(in) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = ctl.b, .msg_controllen = sizeof(ctl.b) };
	struct ff_msg m;
	ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	struct cmsghdr *cm = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL;
	int rfd = -1;
	const struct ff_attr *l;
	uint16_t port;

	if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
		nfds = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		memcpy(fds, CMSG_DATA(cm), sizeof(int) * nfds);
	}
	if (n > 0 && !ff_msg_decode(in, (size_t)n, &m) && m.type >= FF_MSG_VERBS_QP_CREATE &&
	    m.type <= FF_MSG_VERBS_QP_RESET) {
		if (st->mode != FA_SILENT)
			fv_request(fd, &m, fds, nfds);
		return;
	}
	if (nfds == 1)
		rfd = fds[0];
	else
		fv_close_fds(fds, nfds);
	if (rfd >= 0 && (n <= 0 || ff_msg_decode(in, (size_t)n, &m) || m.type != FF_MSG_LEDGER)) {
		close(rfd);
		rfd = -1;
	}

	if (n <= 0 || ff_msg_decode(in, (size_t)n, &m)) {
		fa_drop(st, fd);
		return;
	}
	if (st->mode == FA_SILENT)
		return;
	switch (m.type) {
	case FF_MSG_HELLO: {
		const struct ff_attr *caps = ff_msg_get(&m, FF_ATTR_CAPS);

		if (st->mode == FA_LIMIT) {
			fa_log(st, "limit");
			fa_error(fd, m.seq, FF_ERR_LIMIT);
			fa_drop(st, fd);
			break;
		}

		if (fd < FA_MAX_FD)
			st->caps[fd] = caps ? (uint8_t)ff_attr_u32(caps) : 0;
		fa_log(st, "hello");
		fa_send(fd, FF_MSG_HELLO_REPLY, m.seq, 0, NULL, -1);
		break;
	}
	case FF_MSG_LISTEN:
		l = ff_msg_get(&m, FF_ATTR_LOCAL_EP);
		memcpy(&port, l->val + l->len - 2, 2);
		if (st->nports < 64)
			st->ports[st->nports++] = port;
		fa_log(st, "listen %d", fa_peer_pid(fd));
		fa_send(fd, FF_MSG_OK, m.seq, 0, NULL, -1);
		break;
	case FF_MSG_UNLISTEN:
		l = ff_msg_get(&m, FF_ATTR_LOCAL_EP);
		memcpy(&port, l->val + l->len - 2, 2);
		for (int i = 0; i < st->nports; i++)
			if (st->ports[i] == port) {
				st->ports[i] = st->ports[--st->nports];
				break;
			}
		fa_log(st, "unlisten");
		fa_send(fd, FF_MSG_OK, m.seq, 0, NULL, -1);
		break;
	case FF_MSG_CLOSED:	/* a notification: never answered */
		fa_log(st, "closed");
		break;
	case FF_MSG_LEDGER:	/* a notification: never answered */
		fa_ledger(st, rfd);
		break;
	case FF_MSG_CONNECT:
	case FF_MSG_ACCEPT:
		fa_broker(st, fd, &m);
		break;
	case FF_MSG_LINK_FILL:
		fa_fill(st, fd, &m);
		break;
	case FF_MSG_WATCH:	/* a parking thread; nothing to park unless FF_TEST_PARK_MS */
		fa_watch(st, fd, &m);
		break;
	default:
		_exit(5);
	}
}

static inline int fa_expire(struct fa_state *st)
{
	int64_t now = fa_now(), next = 100;

	for (int i = 0; i < st->nt; i++) {
		struct fa_tuple *t = &st->t[i];

		if (t->waiter < 0)
			continue;
		if (t->deadline <= now)
			fa_decide(st, t, -1, 0, FF_PATH_OVERLAY, "peer-timeout");
		else if (t->deadline - now < next)
			next = t->deadline - now;
	}
	if (st->npark) {
		int p = fa_park_due(st);

		if (p < next)
			next = p;
	}
	if (st->nresume) {
		int p = fa_resume_due(st);

		if (p < next)
			next = p;
	}
	return (int)next;
}

static inline int fa_rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

/* Remove dir and whatever is in it (a test's other files too: an impostor's, a failed case's). */
static inline void fa_cleanup(const char *dir)
{
	nftw(dir, fa_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static inline void fa_run(int lfd, enum fa_mode mode, int logfd, pid_t parent,
			  const char *dir)
{
	static struct fa_state st;

	/*
	 * Out of the test's process group: `timeout` kills that group, and the
	 * agent must outlive the test to remove its directory.
	 */
	setpgid(0, 0);
	st.mode = mode;
	st.logfd = logfd;
	st.p[0] = (struct pollfd){ .fd = lfd, .events = POLLIN };
	st.n = 1;
	while (getppid() == parent) {
		int timeout = fa_expire(&st);

		if (poll(st.p, (nfds_t)st.n, timeout) <= 0)
			continue;
		if (st.p[0].revents) {
			int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

			if (c >= 0 && st.n <= FA_MAX_CLIENTS)
				st.p[st.n++] = (struct pollfd){ .fd = c, .events = POLLIN };
			else if (c >= 0)
				close(c);
		}
		for (int i = st.n - 1; i >= 1; i--)
			if (st.p[i].revents)
				fa_request(&st, st.p[i].fd);
	}
	fa_cleanup(dir);
	_exit(0);
}

#endif
