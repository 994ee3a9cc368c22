/* ffmem: the measuring program of `freeflow bench` that no packaged tool
 * replaces: the machine's physical limits (limits.c), a socket
 * ping-pong, stream and idle test that runs over TCP and over AF_UNIX
 * stream sockets alike (sock.c, serve.c), so the Unix-socket reference
 * path is measured by the same code as the network paths, and a
 * memcached client that times every request (memcached.c).
 *
 * Every result is one line on stdout, "KIND key=value ...", which
 * internal/bench parses; errors go to stderr and exit 1.
 */
#ifndef FFMEM_H
#define FFMEM_H

#include <stddef.h>
#include <stdint.h>

/* Where a client connects or a server listens: exactly one of the two. */
struct ffm_addr {
	const char *tcp;  /* HOST:PORT for a client, PORT for a server */
	const char *path; /* AF_UNIX socket path */
};

/* The first bytes a client sends on every connection. Both ends run on
 * the same machine (the bench's hosts are namespaces of one kernel), so
 * host byte order is the wire order. */
struct ffm_hello {
	char magic[4]; /* "FFM1" */
	uint32_t mode; /* FFM_PINGPONG, FFM_STREAM or FFM_IDLE */
	uint64_t arg;  /* message size; for FFM_IDLE unused */
};

enum { FFM_PINGPONG = 'P', FFM_STREAM = 'S', FFM_IDLE = 'I' };

/* What the server answers at the end of a stream or idle connection. */
struct ffm_report {
	uint64_t bytes; /* bytes the server received */
	double cpu_s;   /* the server process's CPU seconds over the connection */
};

/* util.c */
void ffm_die(const char *what);
void ffm_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
double ffm_now(void);
double ffm_cpu(void);
int ffm_parse_sizes(const char *s, size_t *out, int max);
void ffm_pin(int cpu);
int ffm_write_full(int fd, const void *buf, size_t n);
int ffm_read_full(int fd, void *buf, size_t n);
void *ffm_alloc(size_t n);
int ffm_cmp_double(const void *a, const void *b);
double ffm_percentile(const double *sorted, size_t n, double p);

/* limits.c */
int ffm_limits(int argc, char **argv);

/* sock.c */
int ffm_connect(const struct ffm_addr *a);
int ffm_pingpong(int argc, char **argv);
int ffm_stream(int argc, char **argv);
int ffm_idle(int argc, char **argv);

/* serve.c */
int ffm_serve(int argc, char **argv);

/* memcached.c */
int ffm_memcached(int argc, char **argv);

#endif
