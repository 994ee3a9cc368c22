/* SPDX-License-Identifier: MIT */
/*
 * The FreeFlow agent protocol, version 1: message codec.
 *
 * docs/PROTOCOL.md is the reference and docs/protocol-vectors.txt the test
 * vectors; internal/protocol (Go) implements the same rules.
 *
 * The decoder never allocates: a decoded message points into the datagram,
 * which must outlive it. The encoder writes into a caller's buffer. Nothing
 * here sets errno.
 */
#ifndef FREEFLOW_PROTO_H
#define FREEFLOW_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define FF_PROTO_MAGIC		0x4646
#define FF_PROTO_VERSION	1
#define FF_HDR_LEN		12
#define FF_ATTR_HDR_LEN		4
#define FF_MAX_MESSAGE		65536
#define FF_MAX_PAYLOAD		(FF_MAX_MESSAGE - FF_HDR_LEN)

/*
 * The SYN mark (docs/PROTOCOL.md, "The SYN mark"): the IP TOS byte (IPv6
 * traffic class) of a marked SYN: DSCP 3, RFC 2474's pool for local use.
 */
#define FF_SYN_TOS	0x0c
#define FF_SYN_TOS_MASK	0xfc	/* the DSCP bits; the kernel owns ECN's two */

enum ff_msg_type {
	FF_MSG_HELLO		= 0x01,
	FF_MSG_HELLO_REPLY	= 0x02,
	FF_MSG_LOOKUP		= 0x03,
	FF_MSG_LOOKUP_REPLY	= 0x04,
	/* Connection brokering (PROTOCOL.md, "Connection brokering"). */
	FF_MSG_LISTEN		= 0x10,
	FF_MSG_UNLISTEN		= 0x11,
	FF_MSG_CONNECT		= 0x12,
	FF_MSG_ACCEPT		= 0x13,
	FF_MSG_PATH		= 0x14,
	FF_MSG_CLOSED		= 0x15,
	FF_MSG_LINK_OFFER	= 0x17,	/* library to library, over a link only */
	FF_MSG_LEDGER		= 0x18,	/* the process's ledger memfd (notification) */
	/* Cross-host links (PROTOCOL.md, "Cross-host links"). */
	FF_MSG_LINK_FILL	= 0x19,	/* library to agent: stock connections for a link */
	/* 0x1a is reserved (was LINK_HELLO before the token moved into LINK_OFFER). */
	FF_MSG_LINK_TAKE	= 0x1b,	/* acceptor to connector, on a stock connection */
	FF_MSG_LINK_COMMIT	= 0x1c,	/* connector to acceptor, on a stock connection */
	/* Parking shm connections for a migration (PROTOCOL.md, "Parking"). */
	FF_MSG_WATCH		= 0x1d,	/* library to agent: wait for a connection to park */
	FF_MSG_PARK		= 0x1e,	/* the answer to WATCH: park it on the TCP socket carried */
	FF_MSG_RESUME		= 0x1f,	/* the answer to WATCH: a socket pair back onto the shm channel carried */
	/* The verbs provider's requests and their answers (PROTOCOL.md, "Verbs"). */
	FF_MSG_VERBS_QP_CREATE	= 0x20,
	FF_MSG_VERBS_CONNECT	= 0x21,
	FF_MSG_VERBS_PEER_QP	= 0x22,
	FF_MSG_VERBS_MR_REG	= 0x23,
	FF_MSG_VERBS_MR_GET	= 0x24,
	FF_MSG_VERBS_MR_GRANT	= 0x25,
	FF_MSG_VERBS_MR_DEREG	= 0x26,
	FF_MSG_VERBS_QP_DESTROY	= 0x27,
	FF_MSG_VERBS_UD_LANE	= 0x28,
	FF_MSG_VERBS_UD_LANES	= 0x29,
	FF_MSG_VERBS_QP_RESET	= 0x2a,
	FF_MSG_REGISTER		= 0x40,
	FF_MSG_UNREGISTER	= 0x41,
	FF_MSG_LIST		= 0x42,
	FF_MSG_STATUS		= 0x43,
	FF_MSG_OK		= 0x44,
	FF_MSG_CONNS		= 0x45,	/* admin: the live connections, a page from OFFSET */
	FF_MSG_RELEASE		= 0x46,	/* admin: a migrating container's sessions closed, refused until TIME */
	FF_MSG_PARK_CONTAINER	= 0x47,	/* admin: park a migrating container's shm connections on TCP */
	FF_MSG_ERROR		= 0x7f,
};

enum ff_attr_type {
	FF_ATTR_ERR_CODE	= 1,	/* u32 */
	FF_ATTR_ERR_MSG		= 2,	/* string <= 1024 */
	FF_ATTR_IP		= 3,	/* 4 or 16 bytes, network order */
	FF_ATTR_NAME		= 4,	/* string <= 255 */
	FF_ATTR_HOST		= 5,	/* string <= 255 */
	FF_ATTR_TENANT		= 6,	/* string <= 255 */
	FF_ATTR_CONTAINER_ID	= 7,	/* string <= 255 */
	FF_ATTR_FOUND		= 8,	/* u8 */
	FF_ATTR_LOCAL		= 9,	/* u8 */
	FF_ATTR_FREEFLOW	= 10,	/* u8 */
	FF_ATTR_LIB_VERSION	= 11,	/* string <= 64 */
	FF_ATTR_AGENT_VERSION	= 12,	/* string <= 64 */
	FF_ATTR_JSON		= 13,	/* bytes <= 65000 */
	/*
	 * PROTOCOL.md calls 14 and 15 LOCAL and REMOTE; LOCAL is already the
	 * name of the u8 attribute 9, hence the _EP (endpoint) suffix here.
	 */
	FF_ATTR_LOCAL_EP	= 14,	/* endpoint: 6 or 18 bytes */
	FF_ATTR_REMOTE_EP	= 15,	/* endpoint: 6 or 18 bytes */
	FF_ATTR_PATH_KIND	= 16,	/* u8, enum ff_path_kind */
	FF_ATTR_REASON		= 17,	/* string <= 64 */
	/* 18-20 (NONCE, TIME, MAC) are agent to agent: unknown here. */
	FF_ATTR_CAPS		= 21,	/* u32, FF_CAP_* bits (HELLO) */
	FF_ATTR_LINK_TTL	= 22,	/* u32, ms a link may carry new offers (PATH shm) */
	FF_ATTR_CHANNEL		= 23,	/* u32, a link's channel number (LINK_OFFER) */
	FF_ATTR_LINK		= 24,	/* u64, a cross-host link's name (PATH host-tcp, LINK_FILL) */
	FF_ATTR_COUNT		= 25,	/* u32, stock connections asked for (LINK_FILL) */
	FF_ATTR_TOKEN		= 26,	/* 16 bytes, a cross-host link's secret */
	/* 27 (LINK_PORT) is agent to agent: unknown here. */
	FF_ATTR_OFFSET		= 28,	/* u32, the first entry wanted (VERBS_UD_LANES) */
	FF_ATTR_QPN		= 29,	/* u32, a queue pair's number */
	FF_ATTR_VERBS_PEER	= 30,	/* 24 bytes: u32 QPN, u16 LID, u16 0, 16-byte GID */
	FF_ATTR_VERBS_QP	= 31,	/* 8 bytes: u32 QP type, u32 PD */
	FF_ATTR_VERBS_MR	= 32,	/* 24 bytes: u64 address, u64 length, u32 access, u32 PD */
	FF_ATTR_RKEY		= 33,	/* u32 */
	FF_ATTR_SEGMENTS	= 34,	/* 16..256 bytes, n x (u64 offset, u64 length), one per fd */
	/* 35 (LISTING) is admin only: unknown here. */
	FF_ATTR_VERBS_LANES	= 36,	/* 28..448 bytes, n x (u32 lane id, 24-byte VERBS_PEER), one per fd */
	FF_ATTR_ROLE		= 37,	/* u8, enum ff_shm_role (RESUME) */
	FF_ATTR__COUNT			/* one past the highest known type */
};

/* Bits of CAPS: what the library can do. */
#define FF_CAP_SHM		(1u << 0)	/* takes PATH_KIND shm */
#define FF_CAP_LINK		(1u << 1)	/* takes links (PATH shm's third fd) */
#define FF_CAP_XLINK		(1u << 2)	/* takes cross-host links (PATH host-tcp) */
#define FF_CAP_SYN_MARK		(1u << 3)	/* marks its SYNs, asks only about marked ones (synmark.c) */
#define FF_CAP_RESUME		(1u << 4)	/* its parking thread takes RESUME (shm/resume.c) */
#define FF_CAP_RESUME_PARKED	(1u << 5)	/* and RESUME of a parked connection (two fds) */
#define FF_TOKEN_LEN		16

/* Values of PATH_KIND. */
enum ff_path_kind {
	FF_PATH_OVERLAY		= 0,
	FF_PATH_UNIX		= 1,
	FF_PATH_HOST_TCP	= 2,
	FF_PATH_SHM		= 3,	/* bell socket, memfd (docs/SHM.md)[, link] */
};

/* An endpoint: the address (4 or 16 bytes), then the port, network order. */
#define FF_EP4_LEN		6
#define FF_EP6_LEN		18

/* Wire error codes: the value of ERR_CODE, and what ff_msg_decode returns. */
enum ff_err {
	FF_ERR_BADMSG		= 1,
	FF_ERR_VERSION		= 2,
	FF_ERR_UNKNOWN		= 3,
	FF_ERR_SEQUENCE		= 4,
	FF_ERR_DENIED		= 5,
	FF_ERR_NOTFOUND		= 6,
	FF_ERR_INVALID		= 7,
	FF_ERR_UNAVAILABLE	= 8,
	FF_ERR_INTERNAL		= 9,
	FF_ERR_LIMIT		= 10,
};

/* One attribute; val points into the message it came from. */
struct ff_attr {
	uint16_t type;
	uint16_t len;
	const uint8_t *val;
};

/*
 * A decoded message. attr[t] is valid only when bit t of present is set;
 * unknown attributes are only reachable through ff_attr_next().
 */
struct ff_msg {
	uint8_t type;
	uint32_t seq;
	const uint8_t *payload;
	uint32_t payload_len;
	uint64_t present;
	struct ff_attr attr[FF_ATTR__COUNT];
};

/*
 * Decode one datagram of n bytes, applying every rule of PROTOCOL.md in its
 * order. Returns 0, or the error code a receiver replies with
 * (FF_ERR_BADMSG, FF_ERR_VERSION or FF_ERR_UNKNOWN). A datagram over
 * FF_MAX_MESSAGE fails the length check (BADMSG). Presence of required
 * attributes is the handler's business, not the decoder's.
 */
int ff_msg_decode(const void *buf, size_t n, struct ff_msg *m);

/* Returns the known attribute of this type, or NULL if absent or unknown. */
const struct ff_attr *ff_msg_get(const struct ff_msg *m, uint16_t type);

/*
 * Iterate over all attributes of a decoded message in wire order, unknown
 * ones included. Start with *off = 0. Returns 1 and fills *a, or 0 at the end.
 */
int ff_attr_next(const struct ff_msg *m, uint32_t *off, struct ff_attr *a);

/* Value of a decoded u8 / u32 attribute (sizes are checked by the decoder). */
static inline uint8_t ff_attr_u8(const struct ff_attr *a)
{
	return a->val[0];
}

static inline uint32_t ff_attr_u32(const struct ff_attr *a)
{
	return (uint32_t)a->val[0] | (uint32_t)a->val[1] << 8 |
	       (uint32_t)a->val[2] << 16 | (uint32_t)a->val[3] << 24;
}

static inline uint64_t ff_attr_u64(const struct ff_attr *a)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | a->val[i];
	return v;
}

/*
 * Encoder. Errors are sticky, so a caller adds every attribute and checks
 * once, at ff_enc_finish(). It refuses to produce anything the decoder would
 * reject: an unknown message type, a known attribute of the wrong size, too
 * long or repeated (-EINVAL), or a message over the buffer or FF_MAX_MESSAGE
 * (-EMSGSIZE). Unknown attribute types are written as given.
 */
struct ff_enc {
	uint8_t *buf;
	size_t cap;
	size_t len;
	uint64_t present;
	int err;
};

void ff_enc_start(struct ff_enc *e, void *buf, size_t cap, uint8_t type,
		  uint32_t seq);
void ff_enc_attr(struct ff_enc *e, uint16_t type, const void *val, size_t len);
void ff_enc_u8(struct ff_enc *e, uint16_t type, uint8_t v);
void ff_enc_u32(struct ff_enc *e, uint16_t type, uint32_t v);
void ff_enc_u64(struct ff_enc *e, uint16_t type, uint64_t v);
void ff_enc_str(struct ff_enc *e, uint16_t type, const char *s);

/* Returns the message size in bytes, or the first error as -errno. */
int ff_enc_finish(struct ff_enc *e);

#endif
