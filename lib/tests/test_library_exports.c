/* SPDX-License-Identifier: MIT */
/* Description: libfreeflow.so loads with every symbol resolved and exports nothing an application could call by accident */
#include <dlfcn.h>
#include <stdlib.h>

#include "testutil.h"

/*
 * Defined dynamic symbols other than the version node. Returns the count,
 * or -1 when nm cannot be run (then the test skips: binutils is optional).
 */
static int count_exports(const char *lib)
{
	char cmd[512], line[256];
	FILE *p;
	int n = 0;

	snprintf(cmd, sizeof(cmd), "nm -D --defined-only '%s' 2>/dev/null", lib);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	while (fgets(line, sizeof(line), p)) {
		if (strstr(line, " A FREEFLOW_"))
			continue;
		fprintf(stderr, "exported: %s", line);
		n++;
	}
	return pclose(p) == 0 ? n : -1;
}

int main(int argc, char **argv)
{
	const char *lib = argc > 1 ? argv[1] : getenv("FF_LIBRARY");
	void *h;
	int n;

	if (!lib) {
		fprintf(stderr, "give the library as argument or in FF_LIBRARY\n");
		return T_EXIT_FAIL;
	}
	h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	CHECK(h, "dlopen: %s", dlerror());
	if (h) {
		CHECK(!dlsym(h, "ff_msg_decode") && !dlsym(h, "ff_agent_hello"),
		      "internal functions are visible");
		dlclose(h);
	}
	n = count_exports(lib);
	if (n < 0) {
		printf("nm is not available to list the exports\n");
		return t_failures ? T_EXIT_FAIL : T_EXIT_SKIP;
	}
	CHECK(n == 0, "%d symbols exported", n);
	return t_exit_code();
}
