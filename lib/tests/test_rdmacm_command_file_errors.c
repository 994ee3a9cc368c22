/* SPDX-License-Identifier: MIT */
/* Description: rdma_cm's command file answers bad commands as the kernel's: a short write or a body past the write EINVAL, a bad response pointer EFAULT, an unknown id EINVAL, an unknown command ENOSYS; what the device has not (multicast, AF_IB, the UD port spaces) a clear error, not a hang; GET_EVENT with O_NONBLOCK and nothing queued EAGAIN; the fd is still a character device (librdmacm checks) */
#include <sys/stat.h>

#include "rdmacmtest.h"

#include <rdma/rdma_cma_abi.h>

/* A command of librdmacm's ABI (rdma_cma_abi.h: the header first), its body `in` bytes long. */
#define HDR(c, cmd_, out_) do {						\
	(c).cmd = (cmd_);						\
	(c).in = sizeof(c) - sizeof(struct ucma_abi_cmd_hdr);		\
	(c).out = (out_);						\
} while (0)

/* write()'s errno for the n bytes at cmd (0 if it took them all). */
static int cmd_errno(int fd, const void *cmd, size_t n)
{
	errno = 0;
	return write(fd, cmd, n) == (ssize_t)n ? 0 : errno;
}

static struct ucma_abi_create_id create_cmd(uint16_t ps, void *resp)
{
	struct ucma_abi_create_id c = { .uid = 1, .response = (uintptr_t)resp, .ps = ps };

	HDR(c, UCMA_CMD_CREATE_ID, sizeof(struct ucma_abi_create_id_resp));
	return c;
}

int main(int argc, char **argv)
{
	struct ucma_abi_create_id_resp resp = { 0 };
	struct ucma_abi_create_id cr;
	struct ucma_abi_bind bind = { 0 };
	struct ucma_abi_join_mcast join = { 0 };
	struct ucma_abi_get_event get = { 0 };
	struct ucma_abi_event_resp ev;
	struct ucma_abi_cmd_hdr unknown = { 99, 0, 0 };
	struct stat st;
	int fd, err;

	(void)argc;
	tr_setup(argv);
	HDR(bind, UCMA_CMD_BIND, 0);
	HDR(join, UCMA_CMD_JOIN_MCAST, sizeof(resp));
	HDR(get, UCMA_CMD_GET_EVENT, sizeof(ev));
	fd = open("/dev/infiniband/rdma_cm", O_RDWR | O_CLOEXEC);
	TV_MUST(fd >= 0, "open rdma_cm: %s", strerror(errno));
	CHECK(fstat(fd, &st) == 0 && S_ISCHR(st.st_mode), "the channel is no character device");
	cr = create_cmd(RDMA_PS_TCP, &resp);
	CHECK((err = cmd_errno(fd, &cr, 4)) == EINVAL, "a short write: %s", strerror(err));
	CHECK((err = cmd_errno(fd, &cr, sizeof(cr) - 1)) == EINVAL, "a body past the write: %s", strerror(err));
	CHECK((err = cmd_errno(fd, &unknown, sizeof(unknown))) == ENOSYS, "an unknown command: %s", strerror(err));
	cr = create_cmd(RDMA_PS_TCP, (void *)8);
	CHECK((err = cmd_errno(fd, &cr, sizeof(cr))) == EFAULT, "a bad response pointer: %s", strerror(err));
	cr = create_cmd(RDMA_PS_IPOIB, &resp);
	CHECK((err = cmd_errno(fd, &cr, sizeof(cr))) == EOPNOTSUPP, "RDMA_PS_IPOIB: %s", strerror(err));
	cr = create_cmd(RDMA_PS_TCP, &resp);
	CHECK((err = cmd_errno(fd, &cr, sizeof(cr))) == 0, "CREATE_ID: %s", strerror(err));
	bind.id = resp.id;
	bind.addr.ss_family = AF_IB;
	CHECK((err = cmd_errno(fd, &bind, sizeof(bind))) == EAFNOSUPPORT, "a bind to AF_IB: %s", strerror(err));
	bind.id = resp.id + 1000;
	bind.addr.ss_family = AF_INET;
	CHECK((err = cmd_errno(fd, &bind, sizeof(bind))) == EINVAL, "an unknown id: %s", strerror(err));
	join.id = resp.id;
	join.response = (uintptr_t)&resp;
	CHECK((err = cmd_errno(fd, &join, sizeof(join))) == EOPNOTSUPP, "a multicast join: %s", strerror(err));
	get.response = (uintptr_t)&ev;
	TV_MUST(fcntl(fd, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
	CHECK((err = cmd_errno(fd, &get, sizeof(get))) == EAGAIN, "GET_EVENT with none queued: %s", strerror(err));
	close(fd);
	return t_shim_finish();
}
