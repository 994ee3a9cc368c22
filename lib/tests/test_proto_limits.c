/* SPDX-License-Identifier: MIT */
/* Description: MaxMessage and every attribute rule of PROTOCOL.md, in the decoder and the encoder, plus truncation and mutation robustness */
#include <errno.h>
#include <stdlib.h>

#include "freeflow/proto.h"
#include "testutil.h"

/* The attribute table of PROTOCOL.md, written out again on purpose. */
enum kind { FIXED, IP, EP, STR };
static const struct {
	uint16_t type;
	enum kind kind;
	uint16_t size;	/* FIXED: exact size; STR: limit */
	const char *name;
} spec[] = {
	{ 1, FIXED, 4, "ERR_CODE" },	{ 2, STR, 1024, "ERR_MSG" },
	{ 3, IP, 0, "IP" },		{ 4, STR, 255, "NAME" },
	{ 5, STR, 255, "HOST" },	{ 6, STR, 255, "TENANT" },
	{ 7, STR, 255, "CONTAINER_ID" },{ 8, FIXED, 1, "FOUND" },
	{ 9, FIXED, 1, "LOCAL" },	{ 10, FIXED, 1, "FREEFLOW" },
	{ 11, STR, 64, "LIB_VERSION" },	{ 12, STR, 64, "AGENT_VERSION" },
	{ 13, STR, 65000, "JSON" },
	{ 14, EP, 0, "LOCAL (endpoint)" },{ 15, EP, 0, "REMOTE" },
	{ 16, FIXED, 1, "PATH_KIND" },	{ 17, STR, 64, "REASON" },
};

static uint8_t buf[FF_MAX_MESSAGE + 16];
static uint8_t val[FF_MAX_MESSAGE];

/* Write a raw message with one attribute of the given size, no checks. */
static size_t raw_one(uint8_t type, uint16_t atype, size_t len)
{
	size_t n = FF_HDR_LEN + FF_ATTR_HDR_LEN + len;
	uint32_t plen = (uint32_t)(n - FF_HDR_LEN);

	memcpy(buf, "\x46\x46\x01", 3);
	buf[3] = type;
	memset(buf + 4, 0, 4);
	memcpy(buf + 8, (uint8_t[]){ plen, plen >> 8, plen >> 16, plen >> 24 }, 4);
	memcpy(buf + 12, (uint8_t[]){ atype, atype >> 8, len, len >> 8 }, 4);
	memset(buf + 16, 'x', len);
	return n;
}

static void check_size(uint16_t type, const char *name, size_t len, int ok)
{
	struct ff_msg m;
	struct ff_enc e;
	int ret = ff_msg_decode(buf, raw_one(FF_MSG_OK, type, len), &m);

	CHECK(ret == (ok ? 0 : FF_ERR_BADMSG), "decode %s of %zu bytes gave %d", name, len, ret);
	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_OK, 1);
	ff_enc_attr(&e, type, val, len);
	ret = ff_enc_finish(&e);
	CHECK(ok ? ret == (int)(16 + len) : ret == -EINVAL,
	      "encode %s of %zu bytes gave %d", name, len, ret);
}

static void check_attr_rules(void)
{
	for (size_t i = 0; i < sizeof(spec) / sizeof(spec[0]); i++) {
		uint16_t t = spec[i].type, sz = spec[i].size;
		const char *nm = spec[i].name;

		switch (spec[i].kind) {
		case FIXED:
			check_size(t, nm, sz, 1);
			check_size(t, nm, sz - 1u, 0);
			check_size(t, nm, sz + 1u, 0);
			break;
		case IP:
			for (size_t len = 0; len <= 17; len++)
				check_size(t, nm, len, len == 4 || len == 16);
			break;
		case EP:
			for (size_t len = 0; len <= 19; len++)
				check_size(t, nm, len, len == 6 || len == 18);
			break;
		case STR:
			check_size(t, nm, 0, 1);
			check_size(t, nm, sz, 1);
			check_size(t, nm, sz + 1u, 0);
			break;
		}
	}
}

/* Every known attribute twice is malformed; the encoder refuses it too. */
static void check_duplicates(void)
{
	for (size_t i = 0; i < sizeof(spec) / sizeof(spec[0]); i++) {
		size_t len = spec[i].kind == IP ? 4 : spec[i].kind == FIXED ? spec[i].size : 1;
		size_t one = raw_one(FF_MSG_OK, spec[i].type, len) - FF_HDR_LEN;
		uint32_t plen = (uint32_t)(2 * one);
		struct ff_msg m;
		struct ff_enc e;

		memcpy(buf + FF_HDR_LEN + one, buf + FF_HDR_LEN, one);
		memcpy(buf + 8, (uint8_t[]){ plen, plen >> 8, 0, 0 }, 4);
		CHECK(ff_msg_decode(buf, FF_HDR_LEN + plen, &m) == FF_ERR_BADMSG,
		      "%s twice decoded", spec[i].name);
		ff_enc_start(&e, buf, sizeof(buf), FF_MSG_OK, 1);
		ff_enc_attr(&e, spec[i].type, val, len);
		ff_enc_attr(&e, spec[i].type, val, len);
		CHECK(ff_enc_finish(&e) == -EINVAL, "%s twice encoded", spec[i].name);
	}
}

/* A message of exactly MaxMessage bytes passes; one byte more does not. */
static void check_max_message(void)
{
	struct ff_msg m;
	struct ff_enc e;
	int n;

	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_OK, 1);
	ff_enc_attr(&e, FF_ATTR_JSON, val, 65000);
	ff_enc_attr(&e, 200, val, FF_MAX_PAYLOAD - 65004 - FF_ATTR_HDR_LEN);
	n = ff_enc_finish(&e);
	CHECK(n == FF_MAX_MESSAGE, "max message encoded to %d", n);
	CHECK(ff_msg_decode(buf, FF_MAX_MESSAGE, &m) == 0, "max message rejected");
	CHECK(m.payload_len == FF_MAX_PAYLOAD, "payload %u", m.payload_len);

	/* Same bytes, one more in the last attribute and in length: too big. */
	buf[FF_MAX_MESSAGE] = 'x';
	buf[8] = (FF_MAX_PAYLOAD + 1) & 0xff;
	buf[9] = (FF_MAX_PAYLOAD + 1) >> 8;
	buf[65004 + FF_HDR_LEN + 2] += 1;
	CHECK(ff_msg_decode(buf, FF_MAX_MESSAGE + 1, &m) == FF_ERR_BADMSG,
	      "a %d-byte message decoded", FF_MAX_MESSAGE + 1);

	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_OK, 1);
	ff_enc_attr(&e, FF_ATTR_JSON, val, 65000);
	ff_enc_attr(&e, 200, val, FF_MAX_PAYLOAD - 65004 - FF_ATTR_HDR_LEN + 1);
	CHECK(ff_enc_finish(&e) == -EMSGSIZE, "encoder wrote past MaxMessage");
}

static void check_encoder_errors(void)
{
	struct ff_enc e;
	uint8_t small[20];

	ff_enc_start(&e, small, 11, FF_MSG_LIST, 1);
	CHECK(ff_enc_finish(&e) == -EMSGSIZE, "header in 11 bytes");
	ff_enc_start(&e, small, sizeof(small), FF_MSG_LOOKUP, 1);
	ff_enc_attr(&e, FF_ATTR_IP, val, 16);
	CHECK(ff_enc_finish(&e) == -EMSGSIZE, "32 bytes in a 20-byte buffer");
	ff_enc_start(&e, small, sizeof(small), 0x2b, 1);
	CHECK(ff_enc_finish(&e) == -EINVAL, "reserved type 0x2b encoded");
	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_OK, 1);
	ff_enc_attr(&e, 200, val, 65536);
	CHECK(ff_enc_finish(&e) == -EINVAL, "value over 65535 bytes encoded");
	/* Sticky: the first error wins, later valid attributes do not clear it. */
	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_LOOKUP, 1);
	ff_enc_attr(&e, FF_ATTR_IP, val, 5);
	ff_enc_attr(&e, 200, val, FF_MAX_MESSAGE);
	ff_enc_attr(&e, FF_ATTR_NAME, val, 3);
	CHECK(ff_enc_finish(&e) == -EINVAL, "first error lost");
}

/* Unknown attributes: accepted, repeatable, kept in order, not indexed. */
static void check_unknown_attrs(void)
{
	static const uint16_t types[] = { 0, 18, 40, 41, 255, 65535, 18 };
	struct ff_attr a;
	struct ff_msg m;
	struct ff_enc e;
	uint32_t off = 0;
	size_t i = 0;
	int n;

	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_HELLO, 0xa1b2c3d4);
	for (i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		ff_enc_attr(&e, types[i], val, i);
	ff_enc_u32(&e, FF_ATTR_ERR_CODE, 0x01020304);
	n = ff_enc_finish(&e);
	CHECK(n > 0 && ff_msg_decode(buf, (size_t)n, &m) == 0, "unknown attributes rejected");
	CHECK(m.seq == 0xa1b2c3d4, "seq %#x", m.seq);
	for (i = 0; ff_attr_next(&m, &off, &a); i++)
		CHECK(i == 7 ? a.type == 1 : a.type == types[i] && a.len == i,
		      "attribute %zu is %u/%u", i, a.type, a.len);
	CHECK(i == 8, "%zu attributes iterated", i);
	CHECK(!ff_msg_get(&m, 0) && !ff_msg_get(&m, 18) && !ff_msg_get(&m, 65535),
	      "an unknown attribute is indexed");
	CHECK(ff_msg_get(&m, FF_ATTR_ERR_CODE) &&
	      ff_attr_u32(ff_msg_get(&m, FF_ATTR_ERR_CODE)) == 0x01020304,
	      "u32 is not little-endian");
	CHECK(!memcmp(buf + n - 4, "\x04\x03\x02\x01", 4), "u32 encoded big-endian");
}

/* Every strict prefix of a valid message disagrees with its length. */
static void check_truncation(void)
{
	struct ff_msg m;
	struct ff_enc e;
	uint8_t msg[64];
	int n;

	ff_enc_start(&e, msg, sizeof(msg), FF_MSG_LOOKUP_REPLY, 3);
	ff_enc_u8(&e, FF_ATTR_FOUND, 1);
	ff_enc_str(&e, FF_ATTR_NAME, "db");
	ff_enc_attr(&e, FF_ATTR_IP, "\x0a\xf4\x01\x02", 4);
	n = ff_enc_finish(&e);
	for (int i = 0; i < n; i++) {
		uint8_t *cut = malloc((size_t)i + 1);	/* exact size, for ASan */

		memcpy(cut, msg, (size_t)i);
		CHECK(ff_msg_decode(cut, (size_t)i, &m) == FF_ERR_BADMSG,
		      "prefix of %d bytes accepted", i);
		free(cut);
	}
}

/*
 * Random byte flips of a valid message: the decoder must never read out of
 * bounds (ASan watches), and whatever it accepts must re-encode unchanged.
 */
static void check_mutations(void)
{
	uint8_t orig[80], msg[80], out[80];
	struct ff_msg m;
	struct ff_enc e;
	int n;

	ff_enc_start(&e, orig, sizeof(orig), FF_MSG_HELLO_REPLY, 7);
	ff_enc_str(&e, FF_ATTR_AGENT_VERSION, "v1");
	ff_enc_str(&e, FF_ATTR_NAME, "web");
	ff_enc_attr(&e, FF_ATTR_IP, "\x0a\xf4\x01\x02", 4);
	ff_enc_u8(&e, FF_ATTR_LOCAL, 1);
	n = ff_enc_finish(&e);
	srand(1);
	for (int iter = 0; iter < 200000; iter++) {
		struct ff_attr a;
		uint32_t off = 0;

		memcpy(msg, orig, (size_t)n);
		for (int k = rand() % 3; k >= 0; k--)
			msg[rand() % n] = (uint8_t)rand();
		if (ff_msg_decode(msg, (size_t)n, &m))
			continue;
		ff_enc_start(&e, out, sizeof(out), m.type, m.seq);
		while (ff_attr_next(&m, &off, &a))
			ff_enc_attr(&e, a.type, a.val, a.len);
		CHECK(ff_enc_finish(&e) == n && !memcmp(out, msg, (size_t)n),
		      "mutation %d decoded but does not re-encode", iter);
	}
}

int main(void)
{
	check_attr_rules();
	check_duplicates();
	check_max_message();
	check_encoder_errors();
	check_unknown_attrs();
	check_truncation();
	check_mutations();
	return t_exit_code();
}
