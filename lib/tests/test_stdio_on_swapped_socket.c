/* SPDX-License-Identifier: MIT */
/* Description: stdio on a swapped socket (fdopen, fprintf, fgets: libc's internal reads and writes, which no wrapper sees) moves bytes intact both ways, and fclose closes it as close() does: a 1 MiB file that then gets its number reads back intact, the agent hears CLOSED, the peer reads EOF; freopen of such a stream onto a file closes the socket as close() does too */
/* Channels: unix host-tcp shm */
#include "shimtest.h"

/* freopen(path) closes the stream's socket inside libc and opens the file in its place. */
static void freopen_case(void)
{
	char p[PATH_MAX + 16], line[64] = "", c;
	int cfd, sfd, before, w;
	FILE *f;

	t_pair(AF_INET, &cfd, &sfd);
	CHECK(t_swapped(sfd), "freopen: the pair is not swapped");
	t_agent_await("closed", t_agent_count("closed"));
	before = t_agent_count("closed");
	t_path(p, sizeof(p), "reopened");
	w = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(w >= 0 && write(w, "from the file\n", 14) == 14 && close(w) == 0, "file");
	f = fdopen(sfd, "r");
	f = f ? freopen(p, "r", f) : NULL;
	unlink(p);
	CHECK(f && fgets(line, sizeof(line), f) && !strcmp(line, "from the file\n"),
	      "freopen: the stream did not read the file: \"%s\"", line);
	CHECK(t_agent_await("closed", before + 1) == before + 1,
	      "freopen: the agent was not told CLOSED for the socket it closed");
	CHECK(recv(cfd, &c, 1, 0) == 0, "freopen: the peer did not read the end of the stream");
	if (f)
		fclose(f);
	close(cfd);
}

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
	freopen_case();
	return t_shim_finish();
}
