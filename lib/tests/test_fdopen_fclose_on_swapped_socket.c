/* SPDX-License-Identifier: MIT */
/* Description: stdio on a swapped socket (fdopen, fprintf, fgets: libc's internal reads and writes, which no wrapper sees) moves bytes intact both ways, and fclose closes it as close() does: a 1 MiB file that then gets its number reads back intact, the agent hears CLOSED, the peer reads EOF */
/* Channels: unix host-tcp shm */
#include "shimtest.h"

int main(int argc, char **argv)
{
	struct timeval tv = { .tv_sec = 5 };
	char line[64] = "", got[16] = "";
	int cfd, sfd, before, n = 0;
	FILE *f;

	(void)argc;
	t_setup_swapped_pair(argv, &cfd, &sfd);
	/* A peer that would wait forever fails the test instead. */
	setsockopt(cfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	f = fdopen(sfd, "r+");
	CHECK(f != NULL, "fdopen: %s", strerror(errno));
	if (!f)
		return t_shim_finish();
	CHECK(fprintf(f, "hello %d\n", 42) > 0 && fflush(f) == 0, "fprintf: %s", strerror(errno));
	while (n < 9 && recv(cfd, got + n, 1, 0) == 1)
		n++;
	CHECK(n == 9 && !memcmp(got, "hello 42\n", 9), "the peer got %d bytes of stdio's line: %.*s",
	      n, n, got);
	CHECK(send(cfd, "world\n", 6, 0) == 6, "peer's send");
	CHECK(fgets(line, sizeof(line), f) && !strcmp(line, "world\n"),
	      "fgets did not read the peer's line: \"%s\" (%s)", line, strerror(errno));
	t_agent_await("closed", t_agent_count("closed"));
	before = t_agent_count("closed");
	CHECK(fclose(f) == 0, "fclose: %s", strerror(errno));
	t_closed_then_file("fclose", sfd, cfd, before);
	return t_shim_finish();
}
