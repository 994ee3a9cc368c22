/* SPDX-License-Identifier: MIT */
/* Description: an "agent" served by a process of the caller's own pid namespace (as a process of its own container would be) is refused before a byte is sent to it: connections stay on the overlay with their data intact, and FREEFLOW_DEBUG says it is not trusted and who serves it; the agent outside the namespace is trusted */
#include "shimtest.h"

/* "<self> pair": one connection pair; 0 if it carried its data on the overlay, 2 if swapped. */
static int pair_role(void)
{
	char buf[4] = "";
	int cfd, sfd;

	t_pair(AF_INET, &cfd, &sfd);
	if (write(cfd, "abc", 3) != 3 || read(sfd, buf, 3) != 3 || memcmp(buf, "abc", 3) ||
	    write(sfd, "xyz", 3) != 3 || read(cfd, buf, 3) != 3 || memcmp(buf, "xyz", 3))
		return 1;
	return t_swapped(cfd) || t_swapped(sfd) ? 2 : 0;
}

int main(int argc, char **argv)
{
	char dir[PATH_MAX + 16], sock[PATH_MAX + 32], log[PATH_MAX + 32], who[64];
	int code, lines, with;
	struct stat sb;
	pid_t impostor;

	if (argc == 2 && !strcmp(argv[1], "pair"))
		return pair_role();
	t_shim_setup(argv, FA_BROKER);

	/* The agent outside this pid namespace: trusted, the pair swapped. */
	code = t_role("pair", "1", NULL, "not trusted", &lines, &with);
	CHECK(code == 2 && with == 0, "with the real agent: exit %d (2: swapped), %d lines say not trusted",
	      code, with);

	/* An impostor this process started: listen() was called here, in this namespace. */
	t_path(dir, sizeof(dir), "impostor");
	CHECK(mkdir(dir, 0700) == 0, "mkdir %s", dir);
	impostor = t_start_agent(dir, FA_BROKER);
	snprintf(sock, sizeof(sock), "%s/agent.sock", dir);
	snprintf(log, sizeof(log), "%s/agent.log", dir);
	code = t_role("pair", "1", sock, "not trusted", &lines, &with);
	CHECK(code == 0, "with the impostor: exit %d (0: data intact on the overlay, 1: data wrong, 2: swapped)",
	      code);
	/* The listener and the connecting end stay on the overlay (as with no agent), each saying why. */
	CHECK(with >= 2 && with == lines, "%d of %d debug lines say the agent is not trusted", with, lines);
	snprintf(who, sizeof(who), "served by pid %d, uid 0", (int)getpid());
	code = t_role("pair", "1", sock, who, &lines, &with);
	CHECK(code == 0 && with >= 1, "no debug line names the impostor (\"%s\")", who);
	CHECK(stat(log, &sb) == 0 && sb.st_size == 0,
	      "the impostor was sent something (its log has %lld bytes)", (long long)sb.st_size);
	t_stop(&impostor);
	fa_cleanup(dir);
	return t_shim_finish();
}
