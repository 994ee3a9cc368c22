/* SPDX-License-Identifier: MIT */
/*
 * Fallback reporting. Falling back to the overlay is never an error for the
 * application, so the shim is silent by default; FREEFLOW_DEBUG=1 makes each
 * fallback print one line saying why, so "why is this not fast?" has an
 * answer without a debugger.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"

int ff_debug_on;

void ff_log_init(void)
{
	const char *v = getenv("FREEFLOW_DEBUG");

	ff_debug_on = v && strcmp(v, "0") != 0 && v[0] != '\0';
}

/* Append fmt to the prefix in line[0..n) and write it as one line to stderr. */
static void write_line(char *line, size_t cap, int n, const char *fmt, va_list ap)
{
	n += vsnprintf(line + n, cap - (size_t)n - 1, fmt, ap);
	if (n > (int)cap - 2)
		n = (int)cap - 2;
	line[n++] = '\n';
	/* One write() per line, so lines of concurrent threads do not mix. */
	if (ff_real.write(2, line, (size_t)n) < 0)
		return;
}

void ff_fallback(int fd, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	if (!ff_debug_on)
		return;
	n = snprintf(line, sizeof(line), "libfreeflow[%d]: fd %d stays on the overlay: ",
		     (int)getpid(), fd);
	va_start(ap, fmt);
	write_line(line, sizeof(line), n, fmt, ap);
	va_end(ap);
}

void ff_debug(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	if (!ff_debug_on)
		return;
	n = snprintf(line, sizeof(line), "libfreeflow[%d]: ", (int)getpid());
	va_start(ap, fmt);
	write_line(line, sizeof(line), n, fmt, ap);
	va_end(ap);
}
