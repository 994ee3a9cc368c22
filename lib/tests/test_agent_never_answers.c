/* SPDX-License-Identifier: MIT */
/* Description: an agent that accepts but never answers costs a bounded wait (250 ms: AGENT_TIMEOUT_MS in agent/session.c, above every bound the agents keep inside an answer) and then TCP; later connections of the same thread skip it for a while */
#include "shimtest.h"

int main(int argc, char **argv)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int64_t t0, dt;
	uint16_t port;
	int lfd, cfd, sfd;
	char c;

	(void)argc;
	t_shim_setup(argv, FA_SILENT);
	t0 = t_ms();
	lfd = t_listen(AF_INET, &port);	/* LISTEN waits for the silent agent once */
	dt = t_ms() - t0;
	CHECK(dt >= 240 && dt < 250 + T_SLACK_MS, "listen took %lld ms", (long long)dt);
	len = t_addr(AF_INET, &ss, port);
	cfd = socket(AF_INET, SOCK_STREAM, 0);
	t0 = t_ms();
	CHECK(connect(cfd, (void *)&ss, len) == 0, "connect: %s", strerror(errno));
	dt = t_ms() - t0;
	/* Same thread, within the back-off: no second wait. */
	CHECK(dt < T_NO_WAIT_MS, "connect took %lld ms", (long long)dt);
	sfd = accept(lfd, NULL, NULL);
	CHECK(t_real_domain(cfd) == AF_INET && t_real_domain(sfd) == AF_INET, "swapped");
	CHECK(write(cfd, "x", 1) == 1 && read(sfd, &c, 1) == 1 && c == 'x', "data");
	close(cfd);
	close(sfd);
	close(lfd);
	/* A new thread has no back-off: its connect waits once, boundedly. */
	{
		struct t_conn_arg a = { .family = AF_INET };
		pthread_t th;

		lfd = socket(AF_INET, SOCK_STREAM, 0);
		len = t_addr(AF_INET, &ss, 0);
		bind(lfd, (void *)&ss, len);
		t_raw(SYS_listen, lfd, 4);	/* not announced: no wait here */
		len = sizeof(ss);
		getsockname(lfd, (void *)&ss, &len);
		a.port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		t0 = t_ms();
		pthread_create(&th, NULL, t_connect_thread, &a);
		pthread_join(th, NULL);
		dt = t_ms() - t0;
		CHECK(dt >= 240 && dt < 250 + T_SLACK_MS, "connect in a new thread took %lld ms", (long long)dt);
		sfd = accept(lfd, NULL, NULL);
		CHECK(write(a.fd, "y", 1) == 1 && read(sfd, &c, 1) == 1 && c == 'y', "data");
		close(a.fd);
		close(sfd);
		close(lfd);
	}
	return t_shim_finish();
}
