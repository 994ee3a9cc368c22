/* ffmem: see ffmem.h. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "ffmem.h"

static const char usage[] =
	"usage:\n"
	"  ffmem limits [--cpus A,B] [--ms N] [--memcpy SIZES] [--ring-sizes SIZES] [--ring BYTES]\n"
	"      cache-line round trip between CPUs A and B, memcpy bandwidth, a two-copy\n"
	"      shared-memory ring between two processes (writer copies in, reader copies out)\n"
	"  ffmem serve [--tcp PORT] [--unix PATH]\n"
	"      the server of pingpong, stream and idle, on TCP, on an AF_UNIX socket, or both\n"
	"  ffmem pingpong (--tcp HOST:PORT | --unix PATH) --sizes SIZES [--ms N]\n"
	"      round trips of each size; one-way latency (half the round trip) percentiles\n"
	"  ffmem stream (--tcp HOST:PORT | --unix PATH) --sizes SIZES [--ms N]\n"
	"      one stream of writes of each size; Gbit/s the server received, CPU of both ends\n"
	"  ffmem idle (--tcp HOST:PORT | --unix PATH) [--seconds N]\n"
	"      a connection left idle, both ends blocked on it; CPU both processes used\n"
	"  ffmem memcached (--tcp HOST:PORT | --unix PATH) [--conns N] [--seconds N] [--value BYTES]\n"
	"      a memcached server under 90% get / 10% set from N connections, one request\n"
	"      outstanding on each: requests/s and per-request latency percentiles\n"
	"SIZES is a comma-separated list of bytes, e.g. 1,1024,1048576.\n";

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*run)(int, char **);
	} modes[] = {
		{"limits", ffm_limits}, {"serve", ffm_serve},	{"pingpong", ffm_pingpong},
		{"stream", ffm_stream}, {"idle", ffm_idle},	{"memcached", ffm_memcached},
	};

	/* A peer that goes away must be an error we report, not a signal. */
	signal(SIGPIPE, SIG_IGN);
	if (argc >= 2) {
		for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++)
			if (strcmp(argv[1], modes[i].name) == 0)
				return modes[i].run(argc - 1, argv + 1);
	}
	fputs(usage, stderr);
	return 2;
}
