/* SPDX-License-Identifier: MIT */
/*
 * The requests the library makes on the agent's library socket: HELLO and
 * LOOKUP. Replies are checked for their required attributes here, because
 * the decoder only checks form: a reply missing one is a broken agent, and
 * the caller falls back to the overlay.
 */
#include <errno.h>
#include <limits.h>
#include <string.h>

#include "agent/agent.h"

/* Copy a string attribute; a NUL inside would silently cut it in C. */
static int copy_str(char *dst, size_t cap, const struct ff_attr *a)
{
	if (!a || a->len >= cap || memchr(a->val, 0, a->len))
		return -EPROTO;
	memcpy(dst, a->val, a->len);
	dst[a->len] = '\0';
	return 0;
}

static int copy_ip(uint8_t ip[16], uint8_t *ip_len, const struct ff_attr *a)
{
	if (!a)
		return -EPROTO;
	memcpy(ip, a->val, a->len);
	*ip_len = (uint8_t)a->len;
	return 0;
}

static int copy_u8(uint8_t *dst, const struct ff_attr *a)
{
	if (!a)
		return -EPROTO;
	*dst = ff_attr_u8(a);
	return 0;
}

/*
 * An ERROR reply leaves the connection usable and returns its code; one
 * whose code could be mistaken for success or for an errno is a protocol
 * error like any other broken reply.
 */
static int error_code(struct ff_agent *a, struct ff_reply *r)
{
	uint32_t code = ff_attr_u32(ff_msg_get(&r->msg, FF_ATTR_ERR_CODE));

	ff_reply_close_fds(r);
	if (code == 0 || code > INT_MAX) {
		ff_agent_close(a);
		return -EPROTO;
	}
	return (int)code;
}

/* Send a built request and sort the reply into ERROR / broken / usable. */
static int round_trip(struct ff_agent *a, struct ff_enc *e, uint8_t want,
		      struct ff_reply *r)
{
	int n = ff_enc_finish(e);
	int ret;

	if (n < 0)
		return n;
	ret = ff_agent_request(a, e->buf, n, want, r);
	if (ret)
		return ret;
	if (r->msg.type == FF_MSG_ERROR)
		return error_code(a, r);
	/* Neither HELLO_REPLY nor LOOKUP_REPLY carries fds. */
	ff_reply_close_fds(r);
	return 0;
}

/* A reply that decoded but lacks what the spec requires closes the session. */
static int reply_broken(struct ff_agent *a)
{
	ff_agent_close(a);
	return -EPROTO;
}

static int hello_fill(const struct ff_msg *m, struct ff_hello_info *out)
{
	int ret;

	memset(out, 0, sizeof(*out));
	ret = copy_str(out->agent_version, sizeof(out->agent_version),
		       ff_msg_get(m, FF_ATTR_AGENT_VERSION));
	ret = ret ? ret : copy_str(out->container_id, sizeof(out->container_id),
				   ff_msg_get(m, FF_ATTR_CONTAINER_ID));
	ret = ret ? ret : copy_str(out->name, sizeof(out->name),
				   ff_msg_get(m, FF_ATTR_NAME));
	ret = ret ? ret : copy_str(out->tenant, sizeof(out->tenant),
				   ff_msg_get(m, FF_ATTR_TENANT));
	ret = ret ? ret : copy_str(out->host, sizeof(out->host),
				   ff_msg_get(m, FF_ATTR_HOST));
	return ret ? ret : copy_ip(out->ip, &out->ip_len, ff_msg_get(m, FF_ATTR_IP));
}

int ff_agent_hello(struct ff_agent *a, const char *lib_version,
		   struct ff_hello_info *out)
{
	uint8_t buf[FF_HDR_LEN + 2 * FF_ATTR_HDR_LEN + 64 + 4];
	struct ff_reply r;
	struct ff_enc e;
	int ret;

	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_HELLO, ff_agent_next_seq(a));
	ff_enc_str(&e, FF_ATTR_LIB_VERSION,
		   lib_version ? lib_version : FF_LIB_VERSION);
	/* The agent offers PATH shm, and links, only when both ends' libraries said so. */
	ff_enc_u32(&e, FF_ATTR_CAPS, FF_CAP_SHM | FF_CAP_LINK | FF_CAP_XLINK | FF_CAP_SYN_MARK | FF_CAP_RESUME |
		   FF_CAP_RESUME_PARKED);
	ret = round_trip(a, &e, FF_MSG_HELLO_REPLY, &r);
	if (ret)
		return ret;
	/* The library socket always identifies the caller (PROTOCOL.md). */
	if (hello_fill(&r.msg, out))
		return reply_broken(a);
	return 0;
}

static int lookup_fill(const struct ff_msg *m, struct ff_lookup_info *out)
{
	int ret;

	memset(out, 0, sizeof(*out));
	ret = copy_u8(&out->found, ff_msg_get(m, FF_ATTR_FOUND));
	if (ret || !out->found)
		return ret;
	ret = copy_str(out->name, sizeof(out->name), ff_msg_get(m, FF_ATTR_NAME));
	ret = ret ? ret : copy_str(out->host, sizeof(out->host),
				   ff_msg_get(m, FF_ATTR_HOST));
	ret = ret ? ret : copy_str(out->tenant, sizeof(out->tenant),
				   ff_msg_get(m, FF_ATTR_TENANT));
	ret = ret ? ret : copy_ip(out->ip, &out->ip_len, ff_msg_get(m, FF_ATTR_IP));
	ret = ret ? ret : copy_u8(&out->local, ff_msg_get(m, FF_ATTR_LOCAL));
	return ret ? ret : copy_u8(&out->freeflow, ff_msg_get(m, FF_ATTR_FREEFLOW));
}

int ff_agent_lookup(struct ff_agent *a, const uint8_t *ip, int ip_len,
		    struct ff_lookup_info *out)
{
	uint8_t buf[FF_HDR_LEN + FF_ATTR_HDR_LEN + 16];
	struct ff_reply r;
	struct ff_enc e;
	int ret;

	if (ip_len != 4 && ip_len != 16)
		return -EINVAL;
	ff_enc_start(&e, buf, sizeof(buf), FF_MSG_LOOKUP, ff_agent_next_seq(a));
	ff_enc_attr(&e, FF_ATTR_IP, ip, (size_t)ip_len);
	ret = round_trip(a, &e, FF_MSG_LOOKUP_REPLY, &r);
	if (ret)
		return ret;
	/* FOUND is 0 or 1; anything else is an agent we do not understand. */
	if (lookup_fill(&r.msg, out) || out->found > 1 || out->local > 1 ||
	    out->freeflow > 1)
		return reply_broken(a);
	return 0;
}
