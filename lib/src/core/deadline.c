/* SPDX-License-Identifier: MIT */
/* The bounded poll of one fd (deadline.h); the clock itself is inline there. */
#include <errno.h>
#include <poll.h>

#include "core/core.h"

int ff_poll_until(int fd, short ev, int64_t end_ms)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = ev };
		int64_t left = end_ms - ff_now_ms();
		int n;

		if (left <= 0)
			return 0;
		n = ff_real.poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
		if (n > 0)
			return 1;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}
