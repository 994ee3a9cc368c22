/* SPDX-License-Identifier: MIT */
/* Description: UDP sockets (and AF_UNIX streams) are never tracked: no message reaches the agent, the kernel socket stays what it was, datagrams flow */
#include "shimtest.h"

int main(int argc, char **argv)
{
	struct sockaddr_storage ss;
	socklen_t len = t_addr(AF_INET, &ss, 0);
	int a = -1, b = -1, sp[2];
	char buf[8];

	(void)argc;
	t_shim_setup(argv, FA_BROKER);
	a = socket(AF_INET, SOCK_DGRAM, 0);
	b = socket(AF_INET, SOCK_DGRAM, 0);
	CHECK(bind(a, (void *)&ss, len) == 0, "bind");
	len = sizeof(ss);
	getsockname(a, (void *)&ss, &len);
	CHECK(connect(b, (void *)&ss, len) == 0, "connect UDP");
	CHECK(send(b, "dgram", 5, 0) == 5, "send");
	CHECK(recv(a, buf, sizeof(buf), 0) == 5 && !memcmp(buf, "dgram", 5), "recv");
	CHECK(t_real_domain(b) == AF_INET, "UDP socket changed");
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0, "socketpair");
	CHECK(write(sp[0], "u", 1) == 1 && read(sp[1], buf, 1) == 1, "unix pair");
	close(a);
	close(b);
	close(sp[0]);
	close(sp[1]);
	usleep(20000);
	CHECK(t_agent_count("") == 0, "the agent saw %d events", t_agent_count(""));
	return t_shim_finish();
}
