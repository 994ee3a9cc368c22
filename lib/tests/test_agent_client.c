/* SPDX-License-Identifier: MIT */
/* Description: agent client against a fake agent in a child: HELLO, LOOKUP, ERROR, fds, CLOSED sent without a reply (an answer to it dropped, not read as the next reply), and bounded, clean failure when the agent is silent, garbled, gone or backlogged */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "testutil.h"

#define TIMEOUT_MS	50
/* Scheduling noise on a loaded 2-core machine, not a protocol allowance. */
#define SLACK_MS	150

static const uint8_t ip_known[4] = { 10, 244, 1, 2 };

/* ---- the fake agent, run in a forked child on one end of a socketpair ---- */

static int agent_recv(int fd, uint8_t *buf, struct ff_msg *m)
{
	ssize_t n = recv(fd, buf, FF_MAX_MESSAGE, 0);

	if (n <= 0 || ff_msg_decode(buf, (size_t)n, m))
		return -1;
	return 0;
}

static void agent_send(int fd, struct ff_enc *e, const int *fds, int nfds)
{
	int n = ff_enc_finish(e);

	if (n < 0)
		_exit(3);
	t_send_fds(fd, e->buf, (size_t)n, fds, nfds);
}

static void reply_hello(int fd, uint8_t *out, uint32_t seq)
{
	struct ff_enc e;

	ff_enc_start(&e, out, 512, FF_MSG_HELLO_REPLY, seq);
	ff_enc_str(&e, FF_ATTR_AGENT_VERSION, "fake-1");
	ff_enc_str(&e, FF_ATTR_CONTAINER_ID, "c-1");
	ff_enc_str(&e, FF_ATTR_NAME, "web");
	ff_enc_attr(&e, FF_ATTR_IP, "\x0a\xf4\x01\x01", 4);
	ff_enc_str(&e, FF_ATTR_TENANT, "acme");
	ff_enc_str(&e, FF_ATTR_HOST, "h1");
	agent_send(fd, &e, NULL, 0);
}

static void reply_lookup(int fd, uint8_t *out, const struct ff_msg *q)
{
	const struct ff_attr *ip = ff_msg_get(q, FF_ATTR_IP);
	int found = ip && ip->len == 4 && !memcmp(ip->val, ip_known, 4);
	struct ff_enc e;

	ff_enc_start(&e, out, 512, FF_MSG_LOOKUP_REPLY, q->seq);
	ff_enc_u8(&e, FF_ATTR_FOUND, (uint8_t)found);
	if (found) {
		ff_enc_str(&e, FF_ATTR_NAME, "db");
		ff_enc_str(&e, FF_ATTR_HOST, "h2");
		ff_enc_str(&e, FF_ATTR_TENANT, "acme");
		ff_enc_attr(&e, FF_ATTR_IP, ip_known, 4);
		ff_enc_u8(&e, FF_ATTR_LOCAL, 0);
		ff_enc_u8(&e, FF_ATTR_FREEFLOW, 1);
	}
	agent_send(fd, &e, NULL, 0);
}

static void reply_error(int fd, uint8_t *out, uint32_t seq, uint32_t code)
{
	struct ff_enc e;

	ff_enc_start(&e, out, 512, FF_MSG_ERROR, seq);
	ff_enc_u32(&e, FF_ATTR_ERR_CODE, code);
	ff_enc_str(&e, FF_ATTR_ERR_MSG, "not a registered container");
	agent_send(fd, &e, NULL, 0);
}

/* STATUS: an OK whose fd is the read end of a pipe holding "ping". */
static void reply_with_fd(int fd, uint8_t *out, uint32_t seq)
{
	struct ff_enc e;
	int p[2];

	if (pipe(p) || write(p[1], "ping", 4) != 4)
		_exit(3);
	ff_enc_start(&e, out, 512, FF_MSG_OK, seq);
	ff_enc_str(&e, FF_ATTR_JSON, "{}");
	agent_send(fd, &e, p, 1);
}

/* Set before fake_start: answer CLOSED with OK, as agents did before it became a notification. */
static int answer_closed;

/*
 * A well-behaved agent; HELLO with LIB_VERSION "deny-me" gets DENIED; CLOSED,
 * a notification, gets nothing (unless answer_closed).
 */
static void serve_normal(int fd)
{
	static uint8_t in[FF_MAX_MESSAGE], out[512];
	struct ff_msg q;

	while (agent_recv(fd, in, &q) == 0) {
		const struct ff_attr *v = ff_msg_get(&q, FF_ATTR_LIB_VERSION);

		if (q.type == FF_MSG_HELLO && v && v->len == 7 && !memcmp(v->val, "deny-me", 7))
			reply_error(fd, out, q.seq, FF_ERR_DENIED);
		else if (q.type == FF_MSG_HELLO)
			reply_hello(fd, out, q.seq);
		else if (q.type == FF_MSG_LOOKUP)
			reply_lookup(fd, out, &q);
		else if (q.type == FF_MSG_STATUS)
			reply_with_fd(fd, out, q.seq);
		else if (q.type == FF_MSG_CLOSED && answer_closed)
			reply_with_fd(fd, out, q.seq);	/* an OK, with an fd to be closed */
		else if (q.type == FF_MSG_CLOSED)
			continue;
		else
			reply_error(fd, out, q.seq, FF_ERR_UNKNOWN);
	}
}

/* Reads requests, never answers. */
static void serve_silent(int fd)
{
	static uint8_t in[FF_MAX_MESSAGE];

	while (recv(fd, in, sizeof(in), 0) > 0)
		;
}

static void serve_garbage(int fd)
{
	static uint8_t in[FF_MAX_MESSAGE];

	while (recv(fd, in, sizeof(in), 0) > 0)
		send(fd, "\x46\x46\x01\x02garbage!garbage!", 20, MSG_NOSIGNAL);
}

/* Answers HELLO with a reply for the next seq: a stale or foreign answer. */
static void serve_wrong_seq(int fd)
{
	static uint8_t in[FF_MAX_MESSAGE], out[512];
	struct ff_msg q;

	while (agent_recv(fd, in, &q) == 0)
		reply_hello(fd, out, q.seq + 1);
}

/* Answers HELLO with a LOOKUP_REPLY. */
static void serve_wrong_type(int fd)
{
	static uint8_t in[FF_MAX_MESSAGE], out[512];
	struct ff_msg q;

	while (agent_recv(fd, in, &q) == 0)
		reply_lookup(fd, out, &q);
}

/* A HELLO_REPLY as on the admin socket: AGENT_VERSION only. */
static void serve_missing_attrs(int fd)
{
	static uint8_t in[FF_MAX_MESSAGE], out[512];
	struct ff_msg q;
	struct ff_enc e;

	while (agent_recv(fd, in, &q) == 0) {
		ff_enc_start(&e, out, sizeof(out), FF_MSG_HELLO_REPLY, q.seq);
		ff_enc_str(&e, FF_ATTR_AGENT_VERSION, "fake-1");
		agent_send(fd, &e, NULL, 0);
	}
}

/* A valid reply bigger than the client's reply buffer. */
static void serve_too_big(int fd)
{
	static uint8_t in[FF_MAX_MESSAGE], out[FF_MAX_MESSAGE], json[8000];
	struct ff_msg q;
	struct ff_enc e;

	memset(json, ' ', sizeof(json));
	while (agent_recv(fd, in, &q) == 0) {
		ff_enc_start(&e, out, sizeof(out), FF_MSG_HELLO_REPLY, q.seq);
		ff_enc_attr(&e, FF_ATTR_JSON, json, sizeof(json));
		agent_send(fd, &e, NULL, 0);
	}
}

/* OK carrying more fds than FF_AGENT_MAX_FDS. */
static void serve_many_fds(int fd)
{
	static uint8_t in[FF_MAX_MESSAGE], out[512];
	int fds[FF_AGENT_MAX_FDS + 4] = { 0 };
	struct ff_msg q;
	struct ff_enc e;

	while (agent_recv(fd, in, &q) == 0) {
		ff_enc_start(&e, out, sizeof(out), FF_MSG_OK, q.seq);
		agent_send(fd, &e, fds, FF_AGENT_MAX_FDS + 4);
	}
}

struct fake {
	pid_t pid;
	struct ff_agent a;
};

/* Fork a fake agent serving one end of a socketpair; the client gets the other. */
static int fake_start(struct fake *f, void (*serve)(int))
{
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
		return -1;
	f->pid = fork();
	if (f->pid < 0)
		return -1;
	if (f->pid == 0) {
		close(sv[0]);
		serve(sv[1]);
		_exit(0);
	}
	close(sv[1]);
	return ff_agent_attach(&f->a, sv[0], TIMEOUT_MS);
}

static void fake_stop(struct fake *f)
{
	ff_agent_close(&f->a);
	kill(f->pid, SIGKILL);
	waitpid(f->pid, NULL, 0);
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int count_fds(void)
{
	int n = 0;

	for (int fd = 0; fd < 1024; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

/* ---- the cases ---- */

static void test_hello_lookup(void)
{
	struct ff_lookup_info l;
	struct ff_hello_info h;
	struct fake f;
	int ret;

	CHECK(fake_start(&f, serve_normal) == 0, "fake agent");
	ret = ff_agent_hello(&f.a, NULL, &h);
	CHECK(ret == 0, "hello: %d", ret);
	CHECK(!strcmp(h.agent_version, "fake-1") && !strcmp(h.container_id, "c-1") &&
	      !strcmp(h.name, "web") && !strcmp(h.tenant, "acme") && !strcmp(h.host, "h1") &&
	      h.ip_len == 4 && !memcmp(h.ip, "\x0a\xf4\x01\x01", 4), "hello fields");
	ret = ff_agent_lookup(&f.a, ip_known, 4, &l);
	CHECK(ret == 0 && l.found && !l.local && l.freeflow && !strcmp(l.name, "db") &&
	      !strcmp(l.host, "h2") && !strcmp(l.tenant, "acme") && l.ip_len == 4,
	      "lookup found: %d", ret);
	ret = ff_agent_lookup(&f.a, (const uint8_t *)"\xfd\0\0\0\0\0\0\0\0\0\0\0\0\0\0\x0a", 16, &l);
	CHECK(ret == 0 && !l.found, "lookup v6 not found: %d", ret);
	CHECK(ff_agent_lookup(&f.a, ip_known, 5, &l) == -EINVAL, "5-byte IP sent");
	CHECK(f.a.seq == 3 && f.a.fd >= 0, "seq %u, fd %d", f.a.seq, f.a.fd);
	fake_stop(&f);
}

/* ERROR is an answer, not a failure: the session stays usable. */
static void test_error_reply(void)
{
	struct ff_lookup_info l;
	struct ff_hello_info h;
	struct fake f;
	int ret;

	CHECK(fake_start(&f, serve_normal) == 0, "fake agent");
	ret = ff_agent_hello(&f.a, "deny-me", &h);
	CHECK(ret == FF_ERR_DENIED, "hello: %d, want DENIED", ret);
	ret = ff_agent_lookup(&f.a, ip_known, 4, &l);
	CHECK(ret == 0 && l.found, "lookup after ERROR: %d", ret);
	fake_stop(&f);
}

static void test_fd_passing(void)
{
	uint8_t req[FF_HDR_LEN];
	struct ff_reply r;
	struct ff_enc e;
	struct fake f;
	char got[5] = "";
	int ret;

	CHECK(fake_start(&f, serve_normal) == 0, "fake agent");
	ff_enc_start(&e, req, sizeof(req), FF_MSG_STATUS, ff_agent_next_seq(&f.a));
	ret = ff_agent_request(&f.a, req, ff_enc_finish(&e), FF_MSG_OK, &r);
	CHECK(ret == 0 && r.nfds == 1, "request: %d, %u fds", ret, r.nfds);
	if (ret == 0 && r.nfds == 1) {
		CHECK(fcntl(r.fds[0], F_GETFD) & FD_CLOEXEC, "passed fd lacks FD_CLOEXEC");
		CHECK(read(r.fds[0], got, 4) == 4 && !strcmp(got, "ping"), "read %s", got);
		ff_reply_close_fds(&r);
	}
	fake_stop(&f);
}

/*
 * CLOSED is sent without waiting, and the request after it reads its own
 * reply, also from an agent that answers CLOSED: that answer is dropped
 * (with its fd), not taken for the next request's.
 */
static void test_notify(int answer)
{
	const char *who = answer ? "agent answering CLOSED" : "agent";
	uint8_t buf[FF_HDR_LEN + 2 * (FF_ATTR_HDR_LEN + FF_EP4_LEN)];
	int fds_before = count_fds(), ret;
	struct ff_lookup_info l;
	struct ff_hello_info h;
	struct ff_enc e;
	struct fake f;
	int64_t t0, ms;

	answer_closed = answer;
	CHECK(fake_start(&f, serve_normal) == 0, "fake agent");
	CHECK(ff_agent_hello(&f.a, NULL, &h) == 0, "%s: hello", who);
	t0 = now_ms();
	for (int i = 0; i < 3; i++) {
		ff_enc_start(&e, buf, sizeof(buf), FF_MSG_CLOSED, ff_agent_next_seq(&f.a));
		ff_enc_attr(&e, FF_ATTR_LOCAL_EP, "\x0a\xf4\x01\x01\x9c\x40", FF_EP4_LEN);
		ff_enc_attr(&e, FF_ATTR_REMOTE_EP, "\x0a\xf4\x01\x02\x1f\x90", FF_EP4_LEN);
		ret = ff_agent_notify(&f.a, buf, ff_enc_finish(&e), -1);
		CHECK(ret == 0, "%s: CLOSED %d: %d", who, i, ret);
	}
	ms = now_ms() - t0;
	CHECK(ms < TIMEOUT_MS, "%s: three CLOSED took %lld ms: waited for answers", who,
	      (long long)ms);
	ret = ff_agent_lookup(&f.a, ip_known, 4, &l);
	CHECK(ret == 0 && l.found && f.a.fd >= 0, "%s: lookup after CLOSED: %d, fd %d", who, ret,
	      f.a.fd);
	fake_stop(&f);
	answer_closed = 0;
	CHECK(count_fds() == fds_before, "%s: %d fds before, %d after", who, fds_before,
	      count_fds());
}

/* Each broken agent: a clean negative errno, in time, and the session closed. */
static void expect_failure(const char *what, void (*serve)(int), int want)
{
	struct ff_lookup_info l;
	struct ff_hello_info h;
	int fds_before = count_fds();
	struct fake f;
	int64_t t0, ms;
	int ret;

	CHECK(fake_start(&f, serve) == 0, "%s: fake agent", what);
	t0 = now_ms();
	ret = ff_agent_hello(&f.a, NULL, &h);
	ms = now_ms() - t0;
	CHECK(ret == want, "%s: hello gave %d, want %d", what, ret, want);
	CHECK(ms < TIMEOUT_MS + SLACK_MS, "%s: took %lld ms", what, (long long)ms);
	if (want == -ETIMEDOUT)
		CHECK(ms >= TIMEOUT_MS - 1, "%s: gave up after %lld ms", what, (long long)ms);
	CHECK(f.a.fd == -1, "%s: session left open", what);
	CHECK(ff_agent_lookup(&f.a, ip_known, 4, &l) == -ENOTCONN, "%s: used after failure", what);
	fake_stop(&f);
	CHECK(count_fds() == fds_before, "%s: %d fds before, %d after", what,
	      fds_before, count_fds());
}

static void serve_gone(int fd)
{
	close(fd);
}

static void test_broken_agents(void)
{
	expect_failure("silent", serve_silent, -ETIMEDOUT);
	expect_failure("garbage", serve_garbage, -EPROTO);
	expect_failure("wrong seq", serve_wrong_seq, -EPROTO);
	expect_failure("wrong type", serve_wrong_type, -EPROTO);
	expect_failure("missing attrs", serve_missing_attrs, -EPROTO);
	expect_failure("too big", serve_too_big, -EMSGSIZE);
	expect_failure("too many fds", serve_many_fds, -EPROTO);
	/* SIGPIPE stays at its default: a send to the closed socket would kill us. */
	expect_failure("gone", serve_gone, -ECONNRESET);
}

static void test_connect(void)
{
	char dir[] = "/tmp/ff-agent-XXXXXX", path[128];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct ff_agent a, b;
	int lfd, ret;
	int64_t t0, ms;

	CHECK(mkdtemp(dir), "mkdtemp");
	snprintf(path, sizeof(path), "%s/agent.sock", dir);
	CHECK(ff_agent_connect(&a, path, TIMEOUT_MS) == -ENOENT, "connect to nothing");
	memcpy(sa.sun_path, path, strlen(path) + 1);
	lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	/* Backlog 0 holds one pending connection; the next one must wait. */
	CHECK(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(lfd, 0) == 0, "listen");
	ret = ff_agent_connect(&a, path, TIMEOUT_MS);
	CHECK(ret == 0, "first connect: %d", ret);
	t0 = now_ms();
	ret = ff_agent_connect(&b, path, TIMEOUT_MS);
	ms = now_ms() - t0;
	CHECK(ret == -ETIMEDOUT && b.fd == -1, "connect to a full backlog: %d", ret);
	CHECK(ms >= TIMEOUT_MS - 1 && ms < TIMEOUT_MS + SLACK_MS, "full backlog took %lld ms",
	      (long long)ms);
	ff_agent_close(&a);
	close(lfd);
	CHECK(ff_agent_connect(&a, path, TIMEOUT_MS) == -ECONNREFUSED, "connect to a dead socket");
	unlink(path);
	rmdir(dir);
	memset(path, 'p', sizeof(path) - 1);	/* sun_path holds 108 bytes */
	path[0] = '/';
	path[sizeof(path) - 1] = '\0';
	CHECK(ff_agent_connect(&a, path, TIMEOUT_MS) == -ENAMETOOLONG, "long path");
}

int main(void)
{
	signal(SIGPIPE, SIG_DFL);
	test_hello_lookup();
	test_error_reply();
	test_fd_passing();
	test_notify(0);
	test_notify(1);
	test_broken_agents();
	test_connect();
	return t_exit_code();
}
