/* SPDX-License-Identifier: MIT */
/* Description: a client without the library (its SYN carries no mark: a static binary's) costs a FreeFlow server's accept() no wait and no question to the agent; the connection is listed and counted as overlay peer-no-library; a client with the library marks its SYN, asks, and gets its IP_TOS back as it set it, also while the mark is on; a listener whose application keeps SYNs itself (TCP_SAVE_SYN) still finds them */
#include "shimtest.h"
#include "freeflow/proto.h"

/* A client without the library: raw system calls, so its SYN goes out unmarked. */
static int raw_client(uint16_t port)
{
	struct sockaddr_storage ss;
	socklen_t len = t_addr(AF_INET, &ss, port);
	int fd = (int)t_raw(SYS_socket, AF_INET, SOCK_STREAM, 0);

	CHECK(fd >= 0 && t_raw(SYS_connect, fd, &ss, len) == 0, "raw connect: %s", strerror(errno));
	return fd;
}

static void *accept_thread(void *arg)
{
	struct t_conn_arg *a = arg;

	a->fd = accept(a->fd, NULL, NULL);
	return NULL;
}

static uint64_t no_library_count(int lfd, const void *arg)
{
	uint64_t n = 0;

	(void)arg;
	return pread(lfd, &n, 8, FF_LEDGER_OFF_NO_LIBRARY) == 8 ? n : 0;
}

static long no_library(int lfd, const void *arg)
{
	return (long)no_library_count(lfd, arg);
}

/* An endpoint as the ledger keeps it: address and port, a v4-mapped one as IPv4. */
struct ends {
	uint8_t l[18], r[18];
	int ll, rl;
};

/* An endpoint as the ledger has it: a remote v4-mapped one as IPv4, a local one (mapped 1) as it is. */
static int endpoint(const struct sockaddr_storage *ss, uint8_t out[18], int mapped)
{
	const struct sockaddr_in *in = (const void *)ss;
	const struct sockaddr_in6 *in6 = (const void *)ss;

	if (ss->ss_family == AF_INET) {
		memcpy(out, &in->sin_addr, 4), memcpy(out + 4, &in->sin_port, 2);
		return 6;
	}
	if (!mapped && IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
		memcpy(out, &in6->sin6_addr.s6_addr[12], 4), memcpy(out + 4, &in6->sin6_port, 2);
		return 6;
	}
	memcpy(out, &in6->sin6_addr, 16), memcpy(out + 16, &in6->sin6_port, 2);
	return 18;
}

/* Live ledger entries whose endpoints are exactly arg's. */
static long with_ends(int lfd, const void *arg)
{
	const struct ends *want = arg;
	uint8_t e[FF_LEDGER_ENTRY];
	uint32_t seq;
	long n = 0;

	for (off_t at = FF_LEDGER_HDR; pread(lfd, e, sizeof(e), at) == sizeof(e); at += FF_LEDGER_ENTRY) {
		memcpy(&seq, e + FF_LEDGER_E_SEQ, 4);
		n += (seq & 1) && e[FF_LEDGER_E_LOCAL_LEN] == want->ll &&
		     e[FF_LEDGER_E_REMOTE_LEN] == want->rl &&
		     !memcmp(e + FF_LEDGER_E_LOCAL, want->l, (size_t)want->ll) &&
		     !memcmp(e + FF_LEDGER_E_REMOTE, want->r, (size_t)want->rl);
	}
	return n;
}

/*
 * The accepted end sfd of a client without the library is listed with the
 * names the kernel gives it (the library reads them from the SYN).
 */
static void listed_with_its_names(int sfd, const char *what)
{
	struct sockaddr_storage l, r;
	socklen_t ll = sizeof(l), rl = sizeof(r);
	struct ends want;

	CHECK(!getsockname(sfd, (void *)&l, &ll) && !getpeername(sfd, (void *)&r, &rl), "%s: names", what);
	want.ll = endpoint(&l, want.l, 1);
	want.rl = endpoint(&r, want.r, 0);
	CHECK(t_ledger_sum(with_ends, &want) == 1, "%s: %d live ledger entries with the connection's names, want 1",
	      what, t_ledger_sum(with_ends, &want));
}

int main(int argc, char **argv)
{
	uint8_t syn[512];
	socklen_t sl = sizeof(syn);
	uint16_t port;
	int lfd, cfd, sfd, asks, tos = 0x10, got, one = 1;
	int64_t t0, dt;
	char buf[16];

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	lfd = t_listen(AF_INET, &port);

	asks = t_agent_count("ask");
	cfd = raw_client(port);
	t0 = t_ms();
	sfd = accept(lfd, NULL, NULL);
	dt = t_ms() - t0;
	CHECK(sfd >= 0, "accept: %s", strerror(errno));
	CHECK(dt < T_NO_WAIT_MS, "accept of a client without the library took %lld ms",
	      (long long)dt);
	CHECK(t_agent_count("ask") == asks, "the server asked its agent about a client without the library");
	CHECK(!t_swapped(sfd), "swapped with a peer that has no library");
	CHECK(t_raw(SYS_write, cfd, "only-this", 9) == 9, "write");
	CHECK(read(sfd, buf, sizeof(buf)) == 9 && !memcmp(buf, "only-this", 9), "bytes lost");
	/* The ledger went to the agent without waiting for it (PROTOCOL.md, "The ledger"). */
	CHECK(t_agent_await("ledger", 1) == 1, "no ledger sent");
	CHECK(t_ledger_entries(FF_PATH_OVERLAY, "peer-no-library") == 1,
	      "%d live overlay peer-no-library entries, want the server's end",
	      t_ledger_entries(FF_PATH_OVERLAY, "peer-no-library"));
	CHECK(t_ledger_sum(no_library, NULL) == 1, "%d counted in the ledger's header, want 1",
	      t_ledger_sum(no_library, NULL));
	listed_with_its_names(sfd, "IPv4 listener");
	close(sfd);
	t_raw(SYS_close, cfd);
	CHECK(t_ledger_entries(FF_PATH_OVERLAY, "peer-no-library") == 0, "listed after its close");

	/* A dual-stack listener: the IPv4 client's names are v4-mapped, as the kernel gives them. */
	{
		struct sockaddr_in6 any = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT };
		socklen_t al = sizeof(any);
		int l6 = socket(AF_INET6, SOCK_STREAM, 0);

		CHECK(!bind(l6, (void *)&any, al) && !listen(l6, 4) && !getsockname(l6, (void *)&any, &al),
		      "dual-stack listener: %s", strerror(errno));
		cfd = raw_client(ntohs(any.sin6_port));
		sfd = accept(l6, NULL, NULL);
		CHECK(sfd >= 0 && !t_swapped(sfd), "dual-stack accept");
		listed_with_its_names(sfd, "dual-stack listener");
		close(sfd);
		t_raw(SYS_close, cfd);
		close(l6);
	}

	/* With the library: marked, asked, and the application's TOS is its own. */
	{
		struct t_conn_arg a = { .family = AF_INET, .port = port };
		struct sockaddr_storage ss;
		socklen_t len = t_addr(AF_INET, &ss, port), gl = sizeof(got);
		struct pollfd p;
		pthread_t th;

		cfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		CHECK(!setsockopt(cfd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos)), "IP_TOS");
		CHECK(connect(cfd, (void *)&ss, len) < 0 && errno == EINPROGRESS, "connect");
		CHECK(!getsockopt(cfd, IPPROTO_IP, IP_TOS, &got, &gl) && got == tos,
		      "IP_TOS reads %#x while the SYN is marked, want the application's %#x", got, tos);
		CHECK(t_real_sockopt(cfd, IPPROTO_IP, IP_TOS) == FF_SYN_TOS, "the SYN is not marked");
		a.fd = lfd;
		pthread_create(&th, NULL, accept_thread, &a);
		p = (struct pollfd){ .fd = cfd, .events = POLLOUT };
		CHECK(poll(&p, 1, 5000) == 1, "connect never completed");
		pthread_join(th, NULL);
		sfd = a.fd;
	}
	CHECK(sfd >= 0, "accept: %s", strerror(errno));
	CHECK(t_agent_count("ask") == asks + 2, "%d asks for a client with the library, want 2",
	      t_agent_count("ask") - asks);
	CHECK(t_swapped(sfd) && t_swapped(cfd), "a client with the library did not get the fast path");
	close(sfd);
	close(cfd);

	/* Kept on the overlay (an unregistered listener): its TOS is the application's again. */
	t_unannounced_pair(&cfd, &sfd);
	CHECK(t_real_sockopt(cfd, IPPROTO_IP, IP_TOS) == 0, "IP_TOS %#x left on an overlay connection",
	      t_real_sockopt(cfd, IPPROTO_IP, IP_TOS));
	close(cfd);
	close(sfd);

	/* The application keeps SYNs: the shim leaves them to it. */
	close(lfd);
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	{
		struct sockaddr_storage ss;
		socklen_t len = t_addr(AF_INET, &ss, 0);

		CHECK(!setsockopt(lfd, IPPROTO_TCP, TCP_SAVE_SYN, &one, sizeof(one)), "TCP_SAVE_SYN");
		CHECK(!bind(lfd, (void *)&ss, len) && !listen(lfd, 4), "listen");
		len = sizeof(ss);
		getsockname(lfd, (void *)&ss, &len);
		port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	}
	cfd = raw_client(port);
	sfd = accept(lfd, NULL, NULL);
	CHECK(sfd >= 0 && !getsockopt(sfd, IPPROTO_TCP, TCP_SAVED_SYN, syn, &sl) && sl >= 40,
	      "the application's TCP_SAVED_SYN: %u bytes (%s)", sl, strerror(errno));
	close(sfd);
	t_raw(SYS_close, cfd);
	close(lfd);
	return t_shim_finish();
}
