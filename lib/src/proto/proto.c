/* SPDX-License-Identifier: MIT */
/*
 * Agent protocol codec. The rules and their order come from docs/PROTOCOL.md;
 * the decoder reports the first rule a datagram breaks, so the Go and C
 * decoders give the same answer for every vector in protocol-vectors.txt.
 */
#include <errno.h>
#include <string.h>

#include "freeflow/proto.h"

#define FF_STR_MAX	1024

enum attr_kind {
	KIND_UNKNOWN = 0,	/* zero so that unlisted types are unknown */
	KIND_FIXED,		/* value length must be exactly .size */
	KIND_IP,		/* 4 or 16 */
	KIND_EP,		/* FF_EP4_LEN or FF_EP6_LEN */
	KIND_STR,		/* value length at most .size */
	KIND_SEGS,		/* 16 to .size, a multiple of 16 (SEGMENTS) */
	KIND_LANES,		/* 28 to .size, a multiple of 28 (VERBS_LANES) */
};

static const struct {
	uint8_t kind;
	uint16_t size;
} attr_rules[FF_ATTR__COUNT] = {
	[FF_ATTR_ERR_CODE]	= { KIND_FIXED, 4 },
	[FF_ATTR_ERR_MSG]	= { KIND_STR, FF_STR_MAX },
	[FF_ATTR_IP]		= { KIND_IP, 0 },
	[FF_ATTR_NAME]		= { KIND_STR, 255 },
	[FF_ATTR_HOST]		= { KIND_STR, 255 },
	[FF_ATTR_TENANT]	= { KIND_STR, 255 },
	[FF_ATTR_CONTAINER_ID]	= { KIND_STR, 255 },
	[FF_ATTR_FOUND]		= { KIND_FIXED, 1 },
	[FF_ATTR_LOCAL]		= { KIND_FIXED, 1 },
	[FF_ATTR_FREEFLOW]	= { KIND_FIXED, 1 },
	[FF_ATTR_LIB_VERSION]	= { KIND_STR, 64 },
	[FF_ATTR_AGENT_VERSION]	= { KIND_STR, 64 },
	[FF_ATTR_JSON]		= { KIND_STR, 65000 },
	[FF_ATTR_LOCAL_EP]	= { KIND_EP, 0 },
	[FF_ATTR_REMOTE_EP]	= { KIND_EP, 0 },
	[FF_ATTR_PATH_KIND]	= { KIND_FIXED, 1 },
	[FF_ATTR_REASON]	= { KIND_STR, 64 },
	[FF_ATTR_CAPS]		= { KIND_FIXED, 4 },
	[FF_ATTR_LINK_TTL]	= { KIND_FIXED, 4 },
	[FF_ATTR_CHANNEL]	= { KIND_FIXED, 4 },
	[FF_ATTR_LINK]		= { KIND_FIXED, 8 },
	[FF_ATTR_COUNT]		= { KIND_FIXED, 4 },
	[FF_ATTR_TOKEN]		= { KIND_FIXED, FF_TOKEN_LEN },
	[FF_ATTR_OFFSET]	= { KIND_FIXED, 4 },
	[FF_ATTR_QPN]		= { KIND_FIXED, 4 },
	[FF_ATTR_VERBS_PEER]	= { KIND_FIXED, 24 },
	[FF_ATTR_VERBS_QP]	= { KIND_FIXED, 8 },
	[FF_ATTR_VERBS_MR]	= { KIND_FIXED, 24 },
	[FF_ATTR_RKEY]		= { KIND_FIXED, 4 },
	[FF_ATTR_SEGMENTS]	= { KIND_SEGS, 256 },
	[FF_ATTR_VERBS_LANES]	= { KIND_LANES, 16 * 28 },
	[FF_ATTR_ROLE]		= { KIND_FIXED, 1 },
};

/* The present bitmask needs one bit per known type. */
_Static_assert(FF_ATTR__COUNT <= 64, "ff_msg.present is 64 bits");

static int attr_known(uint16_t type)
{
	return type < FF_ATTR__COUNT && attr_rules[type].kind != KIND_UNKNOWN;
}

/* Whether a known attribute's value length obeys its rule. */
static int attr_len_ok(uint16_t type, size_t len)
{
	switch (attr_rules[type].kind) {
	case KIND_FIXED:
		return len == attr_rules[type].size;
	case KIND_IP:
		return len == 4 || len == 16;
	case KIND_EP:
		return len == FF_EP4_LEN || len == FF_EP6_LEN;
	case KIND_SEGS:
		return len >= 16 && len <= attr_rules[type].size && len % 16 == 0;
	case KIND_LANES:
		return len >= 28 && len <= attr_rules[type].size && len % 28 == 0;
	default:
		return len <= attr_rules[type].size;
	}
}

static int msg_type_known(uint8_t type)
{
	switch (type) {
	case FF_MSG_HELLO:
	case FF_MSG_HELLO_REPLY:
	case FF_MSG_LOOKUP:
	case FF_MSG_LOOKUP_REPLY:
	case FF_MSG_LISTEN:
	case FF_MSG_UNLISTEN:
	case FF_MSG_CONNECT:
	case FF_MSG_ACCEPT:
	case FF_MSG_PATH:
	case FF_MSG_CLOSED:
	case FF_MSG_LINK_OFFER:
	case FF_MSG_LEDGER:
	case FF_MSG_LINK_FILL:
	case FF_MSG_LINK_TAKE:
	case FF_MSG_LINK_COMMIT:
	case FF_MSG_WATCH:
	case FF_MSG_PARK:
	case FF_MSG_RESUME:
	case FF_MSG_VERBS_QP_CREATE:
	case FF_MSG_VERBS_CONNECT:
	case FF_MSG_VERBS_PEER_QP:
	case FF_MSG_VERBS_MR_REG:
	case FF_MSG_VERBS_MR_GET:
	case FF_MSG_VERBS_MR_GRANT:
	case FF_MSG_VERBS_MR_DEREG:
	case FF_MSG_VERBS_QP_DESTROY:
	case FF_MSG_VERBS_UD_LANE:
	case FF_MSG_VERBS_UD_LANES:
	case FF_MSG_VERBS_QP_RESET:
	case FF_MSG_REGISTER:
	case FF_MSG_UNREGISTER:
	case FF_MSG_LIST:
	case FF_MSG_STATUS:
	case FF_MSG_OK:
	case FF_MSG_CONNS:
	case FF_MSG_RELEASE:
	case FF_MSG_PARK_CONTAINER:
	case FF_MSG_ERROR:
		return 1;
	}
	return 0;
}

static uint16_t get_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 |
	       (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

/*
 * Walk the payload in wire order and index the known attributes. All
 * arithmetic is on remaining byte counts, so no hostile length can wrap.
 */
static int decode_attrs(struct ff_msg *m)
{
	uint32_t off = 0;

	while (off < m->payload_len) {
		uint32_t left = m->payload_len - off;
		const uint8_t *p = m->payload + off;
		uint16_t type, len;

		if (left < FF_ATTR_HDR_LEN)
			return FF_ERR_BADMSG;
		type = get_le16(p);
		len = get_le16(p + 2);
		if (len > left - FF_ATTR_HDR_LEN)
			return FF_ERR_BADMSG;
		off += FF_ATTR_HDR_LEN + len;
		if (!attr_known(type))
			continue;
		if (!attr_len_ok(type, len) || (m->present & 1ull << type))
			return FF_ERR_BADMSG;
		m->present |= 1ull << type;
		m->attr[type] = (struct ff_attr){ type, len, p + FF_ATTR_HDR_LEN };
	}
	return 0;
}

int ff_msg_decode(const void *buf, size_t n, struct ff_msg *m)
{
	const uint8_t *p = buf;

	memset(m, 0, sizeof(*m));
	if (n < FF_HDR_LEN)
		return FF_ERR_BADMSG;
	if (get_le16(p) != FF_PROTO_MAGIC)
		return FF_ERR_BADMSG;
	/* Before the length: another version may lay its header out differently. */
	if (p[2] != FF_PROTO_VERSION)
		return FF_ERR_VERSION;
	if (n > FF_MAX_MESSAGE || get_le32(p + 8) != n - FF_HDR_LEN)
		return FF_ERR_BADMSG;
	if (!msg_type_known(p[3]))
		return FF_ERR_UNKNOWN;
	m->type = p[3];
	m->seq = get_le32(p + 4);
	m->payload = p + FF_HDR_LEN;
	m->payload_len = (uint32_t)(n - FF_HDR_LEN);
	return decode_attrs(m);
}

const struct ff_attr *ff_msg_get(const struct ff_msg *m, uint16_t type)
{
	if (!attr_known(type) || !(m->present & 1ull << type))
		return NULL;
	return &m->attr[type];
}

/* Only for decoded messages: decode_attrs already proved every bound. */
int ff_attr_next(const struct ff_msg *m, uint32_t *off, struct ff_attr *a)
{
	const uint8_t *p;

	if (*off >= m->payload_len)
		return 0;
	p = m->payload + *off;
	a->type = get_le16(p);
	a->len = get_le16(p + 2);
	a->val = p + FF_ATTR_HDR_LEN;
	*off += FF_ATTR_HDR_LEN + a->len;
	return 1;
}

void ff_enc_start(struct ff_enc *e, void *buf, size_t cap, uint8_t type,
		  uint32_t seq)
{
	*e = (struct ff_enc){ .buf = buf, .cap = cap, .len = FF_HDR_LEN };
	if (cap < FF_HDR_LEN) {
		e->err = -EMSGSIZE;
		return;
	}
	if (!msg_type_known(type))
		e->err = -EINVAL;
	put_le16(e->buf, FF_PROTO_MAGIC);
	e->buf[2] = FF_PROTO_VERSION;
	e->buf[3] = type;
	put_le32(e->buf + 4, seq);
}

void ff_enc_attr(struct ff_enc *e, uint16_t type, const void *val, size_t len)
{
	size_t need = FF_ATTR_HDR_LEN + len;

	if (e->err)
		return;
	if (len > UINT16_MAX) {
		e->err = -EINVAL;
		return;
	}
	if (attr_known(type)) {
		if (!attr_len_ok(type, len) || (e->present & 1ull << type)) {
			e->err = -EINVAL;
			return;
		}
		e->present |= 1ull << type;
	}
	if (need > e->cap - e->len || need > FF_MAX_MESSAGE - e->len) {
		e->err = -EMSGSIZE;
		return;
	}
	put_le16(e->buf + e->len, type);
	put_le16(e->buf + e->len + 2, (uint16_t)len);
	if (len)
		memcpy(e->buf + e->len + FF_ATTR_HDR_LEN, val, len);
	e->len += need;
}

void ff_enc_u8(struct ff_enc *e, uint16_t type, uint8_t v)
{
	ff_enc_attr(e, type, &v, 1);
}

void ff_enc_u32(struct ff_enc *e, uint16_t type, uint32_t v)
{
	uint8_t b[4];

	put_le32(b, v);
	ff_enc_attr(e, type, b, sizeof(b));
}

void ff_enc_u64(struct ff_enc *e, uint16_t type, uint64_t v)
{
	uint8_t b[8];

	put_le32(b, (uint32_t)v);
	put_le32(b + 4, (uint32_t)(v >> 32));
	ff_enc_attr(e, type, b, sizeof(b));
}

void ff_enc_str(struct ff_enc *e, uint16_t type, const char *s)
{
	ff_enc_attr(e, type, s, strlen(s));
}

int ff_enc_finish(struct ff_enc *e)
{
	if (e->err)
		return e->err;
	put_le32(e->buf + 8, (uint32_t)(e->len - FF_HDR_LEN));
	return (int)e->len;
}
