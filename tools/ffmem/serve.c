/* The server of pingpong, stream and idle: one thread per connection (not
 * a process: a forked child would share the connection with its parent,
 * and FreeFlow moves a shared-memory connection that two processes hold
 * down to a kernel channel). A broken connection is logged and closed;
 * the server keeps serving. */
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ffmem.h"

static int listen_tcp(const char *port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
	char *end;
	long p = strtol(port, &end, 10);
	int fd, one = 1;

	if (*end || p <= 0 || p > 65535)
		ffm_fail("serve: --tcp wants a port number; got %s", port);
	sa.sin_port = htons((uint16_t)p);
	if ((fd = socket(AF_INET, SOCK_STREAM, 0)) < 0)
		ffm_die("create the TCP listener");
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
		ffm_die("set SO_REUSEADDR");
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 128) < 0)
		ffm_die("listen on the TCP port");
	return fd;
}

static int listen_unix(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		ffm_fail("serve: socket path too long: %s", path);
	strcpy(sa.sun_path, path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM, 0)) < 0)
		ffm_die("create the AF_UNIX listener");
	unlink(path); /* a socket file left by an earlier server */
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 128) < 0)
		ffm_die("listen on the socket path");
	return fd;
}

static void report(int fd, uint64_t bytes, double cpu0)
{
	struct ffm_report r = {.bytes = bytes, .cpu_s = ffm_cpu() - cpu0};
	int rc = ffm_write_full(fd, &r, sizeof(r));

	if (rc < 0)
		fprintf(stderr, "ffmem serve: send the report: %s\n", strerror(-rc));
}

/* echo answers every size-byte message with itself until EOF. */
static void echo(int fd, unsigned char *buf, size_t size)
{
	int rc;

	while ((rc = ffm_read_full(fd, buf, size)) > 0)
		if ((rc = ffm_write_full(fd, buf, size)) < 0)
			break;
	if (rc < 0)
		fprintf(stderr, "ffmem serve: ping-pong: %s\n", strerror(-rc));
}

/* sink reads until EOF, size bytes at a time, then reports. */
static void sink(int fd, unsigned char *buf, size_t size)
{
	double cpu0 = ffm_cpu();
	uint64_t bytes = 0;
	ssize_t r;

	while ((r = read(fd, buf, size)) != 0) {
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			fprintf(stderr, "ffmem serve: stream: %s\n", strerror(errno));
			return;
		}
		bytes += (uint64_t)r;
	}
	report(fd, bytes, cpu0);
}

/* idle blocks in read() until the client ends the idle time. */
static void idle(int fd)
{
	double cpu0 = ffm_cpu();
	char c;
	int rc = ffm_read_full(fd, &c, 1);

	if (rc <= 0) {
		fprintf(stderr, "ffmem serve: idle: %s\n", rc == 0 ? "client left" : strerror(-rc));
		return;
	}
	report(fd, 0, cpu0);
}

static void *serve_conn(void *arg)
{
	int fd = (int)(intptr_t)arg, rc;
	struct ffm_hello h;
	unsigned char *buf = NULL;

	if ((rc = ffm_read_full(fd, &h, sizeof(h))) <= 0 || memcmp(h.magic, "FFM1", 4) != 0) {
		fprintf(stderr, "ffmem serve: a connection without a hello: %s\n", rc < 0 ? strerror(-rc) : "bad magic");
		goto out;
	}
	if (h.mode != FFM_IDLE && (h.arg == 0 || h.arg > (1u << 30))) {
		fprintf(stderr, "ffmem serve: message size %llu out of range (1 B to 1 GiB)\n", (unsigned long long)h.arg);
		goto out;
	}
	/* Not ffm_alloc, which exits: a client's size must not stop the
	 * server for everyone else. */
	if (h.mode != FFM_IDLE && posix_memalign((void **)&buf, 4096, (size_t)h.arg) != 0) {
		fprintf(stderr, "ffmem serve: no memory for %llu-byte messages\n", (unsigned long long)h.arg);
		buf = NULL;
		goto out;
	}
	switch (h.mode) {
	case FFM_PINGPONG:
		echo(fd, buf, (size_t)h.arg);
		break;
	case FFM_STREAM:
		sink(fd, buf, (size_t)h.arg);
		break;
	case FFM_IDLE:
		idle(fd);
		break;
	default:
		fprintf(stderr, "ffmem serve: unknown mode %#x\n", h.mode);
	}
out:
	free(buf);
	close(fd);
	return NULL;
}

static void accept_one(int lfd)
{
	int fd = accept(lfd, NULL, NULL), one = 1;
	pthread_attr_t attr;
	pthread_t th;

	if (fd < 0) {
		if (errno != EINTR && errno != ECONNABORTED)
			fprintf(stderr, "ffmem serve: accept: %s\n", strerror(errno));
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); /* fails on AF_UNIX: fine */
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&th, &attr, serve_conn, (void *)(intptr_t)fd) != 0) {
		fprintf(stderr, "ffmem serve: no thread for a new connection; closing it\n");
		close(fd);
	}
	pthread_attr_destroy(&attr);
}

int ffm_serve(int argc, char **argv)
{
	static const struct option opts[] = {
		{"tcp", required_argument, NULL, 't'},
		{"unix", required_argument, NULL, 'u'},
		{NULL, 0, NULL, 0},
	};
	const char *port = NULL, *path = NULL;
	struct pollfd p[2];
	int n = 0, c;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 't')
			port = optarg;
		else if (c == 'u')
			path = optarg;
		else
			ffm_fail("serve: unknown option (see ffmem without arguments)");
	}
	if (optind != argc || (!port && !path))
		ffm_fail("serve: give --tcp PORT, --unix PATH or both");
	/* The socket path first: once the TCP port listens (what the bench
	 * waits for), both do. */
	if (path)
		p[n++] = (struct pollfd){.fd = listen_unix(path), .events = POLLIN};
	if (port)
		p[n++] = (struct pollfd){.fd = listen_tcp(port), .events = POLLIN};
	for (;;) {
		if (poll(p, (nfds_t)n, -1) < 0) {
			if (errno == EINTR)
				continue;
			ffm_die("wait for connections");
		}
		for (int i = 0; i < n; i++)
			if (p[i].revents & POLLIN)
				accept_one(p[i].fd);
	}
}
