/* SPDX-License-Identifier: MIT */
/* Description: a connection parked on TCP, whose connector writes 64 bytes every millisecond, is offered a move back to shm with the connector's RESUME 10 ms after the acceptor's: the acceptor holds first, and the connector's writes of those 10 ms wait in the acceptor's receive queue, where the connector cannot see them; each end looks at its own queues once both hold, so the move is called off then, and goes once the connector pauses; the acceptor reads every byte, in order, to the end (when the connector alone decided, it moved with them unread, and they were lost) */
/* Channels: shm */
#include "shimtest.h"

#include <fcntl.h>

#define MSG	64
#define BUSY_MS	1500	/* writing every millisecond */
#define PAUSE_MS 1500	/* quiet: the move back goes */
#define AFTER	200	/* messages written after the pause */

static int server(int ctl)
{
	int lfd, fd = t_serve_one(ctl, &lfd), err = 0;
	static uint8_t buf[1 << 16];
	size_t got = 0;
	ssize_t n;

	fcntl(fd, F_SETFL, O_NONBLOCK);
	while (!err) {
		struct pollfd p = { fd, POLLIN, 0 };

		if (poll(&p, 1, 5000) != 1) {
			err = -ETIMEDOUT;
			break;
		}
		n = read(fd, buf, sizeof(buf));
		if (n == 0)
			break;
		if (n < 0) {
			err = errno == EAGAIN ? 0 : -errno;
			continue;
		}
		for (ssize_t i = 0; i < n && !err; i++)
			if (buf[i] != t_byte(got + (size_t)i, 9))
				err = -2;
		got += (size_t)n;
	}
	CHECK(!err, "the acceptor's reads: %d (-2: a byte differs) after %zu bytes", err, got);
	CHECK(write(ctl, &got, sizeof(got)) == sizeof(got), "the count");
	close(fd);
	close(lfd);
	return t_exit_code();
}

int main(int argc, char **argv)
{
	size_t sent = 0, got = 0;
	int ctl, fd;
	int64_t end;
	pid_t pid;

	(void)argc;
	setenv("FF_TEST_PARK_MS", "100", 1);
	setenv("FF_TEST_RESUME_MS", "150", 1);
	setenv("FF_TEST_RESUME_LAG_MS", "10", 1);
	t_shim_setup(argv, FA_BROKER);
	fd = t_connect_forked(server, &ctl, &pid);
	for (end = t_ms() + BUSY_MS; t_ms() < end; sent += MSG) {
		CHECK(t_send_stream_from(fd, sent, sent + MSG, 9) == 0, "write at %zu", sent);
		usleep(1000);
	}
	usleep(PAUSE_MS * 1000);
	CHECK(t_ledger_entries(FF_PATH_SHM, "") == 2, "%d ends back on shm after the pause, want 2 (%d RESUMEs sent)",
	      t_ledger_entries(FF_PATH_SHM, ""), t_agent_count("resume"));
	for (int i = 0; i < AFTER; i++, sent += MSG)
		CHECK(t_send_stream_from(fd, sent, sent + MSG, 9) == 0, "write at %zu", sent);
	shutdown(fd, SHUT_WR);
	CHECK(read(ctl, &got, sizeof(got)) == sizeof(got) && got == sent, "the acceptor read %zu bytes of %zu", got,
	      sent);
	close(fd);
	t_wait_child(pid, "the acceptor");
	return t_exit_code();
}
