/* SPDX-License-Identifier: MIT */
/* Description: the C decoder passes every line of docs/protocol-vectors.txt, and ok vectors re-encode to the same bytes; shm headers match the library's layout constants and the fake agent's memfds; ledgers match the library's ledger layout; layout lines hold exactly the public headers' constants */
#include <stdlib.h>

#include "fake_agent.h"
#include "freeflow/proto.h"
#include "freeflow/ledger_layout.h"
#include "freeflow/shm_layout.h"
#include "freeflow/verbs_layout.h"
#include "testutil.h"

static const char *const err_names[] = {
	[FF_ERR_BADMSG] = "BADMSG",	[FF_ERR_VERSION] = "VERSION",
	[FF_ERR_UNKNOWN] = "UNKNOWN",	[FF_ERR_SEQUENCE] = "SEQUENCE",
	[FF_ERR_DENIED] = "DENIED",	[FF_ERR_NOTFOUND] = "NOTFOUND",
	[FF_ERR_INVALID] = "INVALID",	[FF_ERR_UNAVAILABLE] = "UNAVAILABLE",
	[FF_ERR_INTERNAL] = "INTERNAL",
};

static const uint8_t all_types[] = {
	FF_MSG_HELLO, FF_MSG_HELLO_REPLY, FF_MSG_LOOKUP, FF_MSG_LOOKUP_REPLY,
	FF_MSG_LISTEN, FF_MSG_UNLISTEN, FF_MSG_CONNECT, FF_MSG_ACCEPT,
	FF_MSG_PATH, FF_MSG_CLOSED,
	FF_MSG_REGISTER, FF_MSG_UNREGISTER, FF_MSG_LIST, FF_MSG_STATUS,
	FF_MSG_OK, FF_MSG_ERROR,
};

struct seen {
	int ok, bad, shm, ledger, layout;
	int types[256];
	int codes[FF_ERR_INTERNAL + 1];
};

/* The canonical form of PROTOCOL.md, "Test vectors". */
static void canonical(const struct ff_msg *m, char *out)
{
	struct ff_attr a;
	uint32_t off = 0;
	int n = 0;

	out += sprintf(out, "type=0x%02x seq=%u attrs=", m->type, m->seq);
	while (ff_attr_next(m, &off, &a)) {
		out += sprintf(out, "%s%u:", n++ ? "," : "", a.type);
		out = t_hex(out, a.val, a.len);
	}
	if (!n)
		strcpy(out, "-");
}

/* Build the message again from its decoded attributes, in wire order. */
static void check_reencode(const char *name, const struct ff_msg *m,
			   const uint8_t *wire, long n)
{
	static uint8_t buf[FF_MAX_MESSAGE];
	struct ff_enc e;
	struct ff_attr a;
	uint32_t off = 0;
	int len;

	ff_enc_start(&e, buf, sizeof(buf), m->type, m->seq);
	while (ff_attr_next(m, &off, &a))
		ff_enc_attr(&e, a.type, a.val, a.len);
	len = ff_enc_finish(&e);
	CHECK(len == n && !memcmp(buf, wire, (size_t)n),
	      "%s: re-encoding gives %d bytes that differ", name, len);
}

static void check_ok(const char *name, const uint8_t *wire, long n,
		     const char *want, struct seen *s)
{
	struct ff_msg m;
	char *got = malloc((size_t)n * 4 + 64);
	int ret = ff_msg_decode(wire, (size_t)n, &m);

	CHECK(got, "out of memory");
	if (!got)
		return;
	CHECK(ret == 0, "%s: decode failed with %d, want %s", name, ret, want);
	if (ret == 0) {
		canonical(&m, got);
		CHECK(!strcmp(got, want), "%s: decoded to\n  %s\nwant\n  %s",
		      name, got, want);
		check_reencode(name, &m, wire, n);
		s->types[m.type]++;
	}
	s->ok++;
	free(got);
}

static void check_bad(const char *name, const uint8_t *wire, long n,
		      const char *want, struct seen *s)
{
	struct ff_msg m;
	int ret = ff_msg_decode(wire, (size_t)n, &m);
	const char *got = ret > 0 && ret <= FF_ERR_INTERNAL ? err_names[ret] : "ok";

	CHECK(!strcmp(got, want), "%s: decode gave %s (%d), want %s",
	      name, got, ret, want);
	if (ret > 0 && ret <= FF_ERR_INTERNAL)
		s->codes[ret]++;
	s->bad++;
}

/*
 * "<name> shm <hex> ring_size=<n>": the first 16 bytes of a memfd the
 * agent hands over, as the library's FF_SHM_* constants (which its attach
 * check uses) say they must be, and as the fake agent writes them.
 */
static void check_shm(const char *name, const uint8_t *wire, long n,
		      const char *want, struct seen *s)
{
	uint8_t hdr[16], fake[16];
	unsigned long ring;
	char *end;
	int fd;

	if (strncmp(want, "ring_size=", 10)) {
		CHECK(0, "%s: want ring_size=<n>, got %s", name, want);
		return;
	}
	ring = strtoul(want + 10, &end, 10);
	CHECK(*end == '\0' && ring >= FF_SHM_RING_MIN && ring <= FF_SHM_RING_MAX,
	      "%s: ring_size %s is out of range", name, want + 10);
	fa_put_le32(hdr, FF_SHM_MAGIC);
	fa_put_le32(hdr + 4, FF_SHM_VERSION);
	fa_put_le32(hdr + 8, (uint32_t)ring);
	fa_put_le32(hdr + 12, 0);
	CHECK(n == (long)sizeof(hdr) && !memcmp(hdr, wire, sizeof(hdr)),
	      "%s: %ld bytes that differ from the library's header layout", name, n);
	fd = fa_memfd((uint32_t)ring, FF_SHM_MAGIC, FA_SHM_BYTES(ring), FA_SEALS);
	CHECK(pread(fd, fake, sizeof(fake), 0) == (ssize_t)sizeof(fake) &&
	      n == (long)sizeof(fake) && !memcmp(fake, wire, sizeof(fake)),
	      "%s: the fake agent's memfd starts with other bytes", name);
	close(fd);
	s->shm++;
}

/*
 * "<name> ledger <hex> opened=<n> opened_tcp=<n> no_library=<n> used=<n> seq=<n> bytes=<n> path=<n>
 * local=<hex> remote=<hex> fd=<n> ino=<n> reason=<text>": a ledger of one slot, as the
 * library's FF_LEDGER_* constants lay it out (host byte order: the
 * vectors are those of a little-endian host).
 */
static void check_ledger(const char *name, const uint8_t *wire, long n, const char *want,
			 struct seen *s)
{
	uint8_t l[FF_LEDGER_HDR + FF_LEDGER_ENTRY] = { 0 }, *e = l + FF_LEDGER_HDR;
	unsigned long long opened, opened_tcp, no_library, ino;
	unsigned used, seq, bytes, path;
	int fd;
	char local[40], remote[40];
	uint32_t u32[3] = { FF_LEDGER_VERSION, 1, FF_LEDGER_ENTRY };
	long ll, rl;
	int at = -1;

	if (sscanf(want, "opened=%llu opened_tcp=%llu no_library=%llu used=%u seq=%u bytes=%u path=%u "
		   "local=%39s remote=%39s fd=%d ino=%llu reason=%n", &opened, &opened_tcp, &no_library,
		   &used, &seq, &bytes, &path, local, remote, &fd, &ino, &at) != 11 || at < 0) {
		CHECK(0, "%s: cannot read the fields %s", name, want);
		return;
	}
	memcpy(l, FF_LEDGER_MAGIC, 4);
	memcpy(l + FF_LEDGER_OFF_VERSION, &u32[0], 4);
	memcpy(l + FF_LEDGER_OFF_SLOTS, &u32[1], 4);
	memcpy(l + FF_LEDGER_OFF_ENTRY, &u32[2], 4);
	memcpy(l + FF_LEDGER_OFF_OPENED, &(uint64_t){ opened }, 8);
	memcpy(l + FF_LEDGER_OFF_OPENED_TCP, &(uint64_t){ opened_tcp }, 8);
	memcpy(l + FF_LEDGER_OFF_NO_LIBRARY, &(uint64_t){ no_library }, 8);
	memcpy(l + FF_LEDGER_OFF_USED, &(uint32_t){ used }, 4);
	memcpy(e + FF_LEDGER_E_SEQ, &(uint32_t){ seq }, 4);
	memcpy(e + FF_LEDGER_E_BYTES, &(uint32_t){ bytes }, 4);
	ll = t_unhex(local, strlen(local), e + FF_LEDGER_E_LOCAL, FF_EP6_LEN);
	rl = t_unhex(remote, strlen(remote), e + FF_LEDGER_E_REMOTE, FF_EP6_LEN);
	e[FF_LEDGER_E_LOCAL_LEN] = (uint8_t)ll;
	e[FF_LEDGER_E_REMOTE_LEN] = (uint8_t)rl;
	e[FF_LEDGER_E_PATH] = (uint8_t)path;
	e[FF_LEDGER_E_REASON_LEN] = (uint8_t)strlen(want + at);
	CHECK(ll > 0 && rl > 0 && strlen(want + at) <= FF_LEDGER_REASON_MAX, "%s: bad fields %s",
	      name, want);
	memcpy(e + FF_LEDGER_E_REASON, want + at, e[FF_LEDGER_E_REASON_LEN]);
	memcpy(e + FF_LEDGER_E_FD, &(int32_t){ fd }, 4);
	memcpy(e + FF_LEDGER_E_INO, &(uint64_t){ ino }, 8);
	CHECK(n == (long)sizeof(l) && !memcmp(l, wire, sizeof(l)),
	      "%s: %ld bytes that differ from the library's ledger layout", name, n);
	s->ledger++;
}

/* A layout line's keys and the public headers' values. */
struct layout_key {
	const char *key;
	unsigned long long val;
	const char *str;	/* a value that is text, not a number */
};

#define K(k, v)	{ k, v, NULL }
static const struct layout_key shm_keys[] = {
	K("magic", FF_SHM_MAGIC), K("version", FF_SHM_VERSION), K("hdr_size", FF_SHM_HDR_SIZE),
	K("ring_min", FF_SHM_RING_MIN), K("ring_max", FF_SHM_RING_MAX),
	K("off_switch_by", FF_SHM_OFF_SWITCH_BY), K("off_offer", FF_SHM_OFF_OFFER),
	K("off_offer_wait", FF_SHM_OFF_OFFER_WAIT), K("off_done", FF_SHM_OFF_DONE),
	K("off_done_connector", FF_SHM_OFF_DONE_OF(FF_SHM_CONNECTOR)),
	K("off_done_acceptor", FF_SHM_OFF_DONE_OF(FF_SHM_ACCEPTOR)),
	K("off_resume", FF_SHM_OFF_RESUME), K("resume_held_connector", FF_RESUME_HELD_CONNECTOR),
	K("resume_held_acceptor", FF_RESUME_HELD_ACCEPTOR), K("resume_go", FF_RESUME_GO),
	K("resume_off", FF_RESUME_OFF), K("resume_done_connector", FF_RESUME_DONE_CONNECTOR),
	K("resume_done_acceptor", FF_RESUME_DONE_ACCEPTOR),
	K("resume_quiet_connector", FF_RESUME_QUIET_CONNECTOR), K("resume_quiet_acceptor", FF_RESUME_QUIET_ACCEPTOR),
	K("off_ctl0", FF_SHM_OFF_CTL0), K("off_ctl1", FF_SHM_OFF_CTL1),
	K("ctl_head", FF_SHM_CTL_HEAD), K("ctl_base", FF_SHM_CTL_BASE), K("ctl_tail", FF_SHM_CTL_TAIL),
	K("ctl_cons_wait", FF_SHM_CTL_CONS_WAIT), K("ctl_prod_wait", FF_SHM_CTL_PROD_WAIT),
	K("ctl_cons_busy", FF_SHM_CTL_CONS_BUSY), K("ctl_prod_shut", FF_SHM_CTL_PROD_SHUT),
	K("ctl_cons_closed", FF_SHM_CTL_CONS_CLOSED), K("ctl_spill", FF_SHM_CTL_SPILL),
	K("bell", FF_SHM_BELL), K("switch", FF_SHM_SWITCH),
	K("connector", FF_SHM_CONNECTOR), K("acceptor", FF_SHM_ACCEPTOR), K("parked", FF_SHM_PARKED),
	K("offer_none", FF_OFFER_NONE), K("offer_offered", FF_OFFER_OFFERED),
	K("offer_taken", FF_OFFER_TAKEN), K("offer_withdrawn", FF_OFFER_WITHDRAWN),
	K("spill_none", FF_SPILL_NONE), K("spill_used", FF_SPILL_USED),
	K("spill_writing", FF_SPILL_WRITING), K("spill_freeing", FF_SPILL_FREEING),
	K("keep", FF_SHM_KEEP),
};
static const struct layout_key ledger_keys[] = {
	{ "magic", 0, FF_LEDGER_MAGIC }, K("version", FF_LEDGER_VERSION), K("hdr", FF_LEDGER_HDR),
	K("entry", FF_LEDGER_ENTRY), K("slots_max", FF_LEDGER_SLOTS_MAX),
	K("off_version", FF_LEDGER_OFF_VERSION), K("off_slots", FF_LEDGER_OFF_SLOTS),
	K("off_entry", FF_LEDGER_OFF_ENTRY), K("off_opened", FF_LEDGER_OFF_OPENED),
	K("off_opened_tcp", FF_LEDGER_OFF_OPENED_TCP), K("off_no_library", FF_LEDGER_OFF_NO_LIBRARY),
	K("off_used", FF_LEDGER_OFF_USED), K("off_used_kept", FF_LEDGER_OFF_USED_KEPT),
	K("e_seq", FF_LEDGER_E_SEQ), K("e_bytes", FF_LEDGER_E_BYTES),
	K("e_local_len", FF_LEDGER_E_LOCAL_LEN), K("e_remote_len", FF_LEDGER_E_REMOTE_LEN),
	K("e_path", FF_LEDGER_E_PATH), K("e_reason_len", FF_LEDGER_E_REASON_LEN),
	K("e_local", FF_LEDGER_E_LOCAL), K("e_remote", FF_LEDGER_E_REMOTE),
	K("e_reason", FF_LEDGER_E_REASON), K("reason_max", FF_LEDGER_REASON_MAX),
	K("e_fd", FF_LEDGER_E_FD), K("e_ino", FF_LEDGER_E_INO),
};
static const struct layout_key vqp_keys[] = {
	K("magic", FF_VQP_MAGIC), K("version", FF_VQP_VERSION), K("hdr_size", FF_VQP_HDR_SIZE),
	K("ring_min", FF_VQP_RING_MIN), K("ring_max", FF_VQP_RING_MAX),
	K("off_ring_size", FF_VQP_OFF_RING_SIZE), K("off_dead", FF_VQP_OFF_DEAD),
	K("dead_gone", FF_VQP_DEAD_GONE), K("dead_reset", FF_VQP_DEAD_RESET), K("off_access", FF_VQP_OFF_ACCESS),
	K("off_lanes", FF_VQP_OFF_LANES), K("off_mr_gen", FF_VQP_OFF_MR_GEN),
	K("off_prod", FF_VQP_OFF_PROD), K("off_cons", FF_VQP_OFF_CONS),
	K("off_waiting", FF_VQP_OFF_WAITING), K("off_armed", FF_VQP_OFF_ARMED),
	K("off_rq_posted", FF_VQP_OFF_RQ_POSTED), K("off_rnr_timer", FF_VQP_OFF_RNR_TIMER),
	K("rec_hdr", FF_VQP_REC_HDR), K("rec_align", FF_VQP_REC_ALIGN), K("rec_len", FF_VQP_REC_LEN),
	K("rec_op", FF_VQP_REC_OP), K("rec_flags", FF_VQP_REC_FLAGS), K("rec_imm", FF_VQP_REC_IMM),
	K("rec_total", FF_VQP_REC_TOTAL),
	K("op_send", FF_VQP_OP_SEND), K("op_send_imm", FF_VQP_OP_SEND_IMM),
	K("op_write_imm", FF_VQP_OP_WRITE_IMM), K("op_pad", FF_VQP_OP_PAD),
	K("first", FF_VQP_FIRST), K("last", FF_VQP_LAST), K("solicited", FF_VQP_SOLICITED),
	K("grh", FF_VQP_GRH),
};
#undef K
#define N_KEYS(a)	(sizeof(a) / sizeof((a)[0]))

/* "ring=<n>:<bytes>": FF_SHM_RESIDENT of rings of n bytes. */
static void check_resident(const char *name, const char *kv)
{
	unsigned long ring, bytes;
	int at = -1;

	if (sscanf(kv, "ring=%lu:%lu%n", &ring, &bytes, &at) != 2 || kv[at] != '\0') {
		CHECK(0, "%s: %s is not ring=<n>:<bytes>", name, kv);
		return;
	}
	CHECK(FF_SHM_RESIDENT(ring) == bytes, "%s: FF_SHM_RESIDENT(%lu) is %lu, the vector says %lu",
	      name, ring, (unsigned long)FF_SHM_RESIDENT(ring), bytes);
}

/* One key=value of a layout line against keys: unknown keys and other values fail. */
static void check_key(const char *name, const char *kv, const struct layout_key *keys, size_t n,
		      unsigned char *seen)
{
	const char *eq = strchr(kv, '=');
	size_t len = eq ? (size_t)(eq - kv) : 0;
	unsigned long long v;
	char *end;

	for (size_t i = 0; eq && i < n; i++) {
		if (strlen(keys[i].key) != len || strncmp(keys[i].key, kv, len))
			continue;
		seen[i]++;
		if (keys[i].str) {
			CHECK(!strcmp(keys[i].str, eq + 1), "%s: %s, the header says %s", name, kv,
			      keys[i].str);
			return;
		}
		v = strtoull(eq + 1, &end, 0);
		CHECK(*end == '\0' && v == keys[i].val, "%s: %s, the header says %llu (%#llx)", name,
		      kv, keys[i].val, keys[i].val);
		return;
	}
	CHECK(0, "%s: key %s is not a constant of the public layout headers", name, kv);
}

/*
 * "<name> layout - key=value...": shm-layout, ledger-layout and verbs-qp-layout
 * hold every constant of include/freeflow/shm_layout.h, ledger_layout.h and verbs_layout.h, once and
 * with its value; shm-resident holds FF_SHM_RESIDENT for some ring sizes.
 */
static void check_layout(const char *name, char *rest, struct seen *s)
{
	const struct layout_key *keys = NULL;
	unsigned char seen[N_KEYS(shm_keys) + N_KEYS(ledger_keys) + N_KEYS(vqp_keys)] = { 0 };
	size_t n = 0;
	int resident = !strcmp(name, "shm-resident"), count = 0;

	if (!strcmp(name, "shm-layout"))
		keys = shm_keys, n = N_KEYS(shm_keys);
	else if (!strcmp(name, "ledger-layout"))
		keys = ledger_keys, n = N_KEYS(ledger_keys);
	else if (!strcmp(name, "verbs-qp-layout"))
		keys = vqp_keys, n = N_KEYS(vqp_keys);
	else if (!resident) {
		CHECK(0, "%s: a layout line is shm-layout, shm-resident, ledger-layout or verbs-qp-layout", name);
		return;
	}
	for (char *kv = strtok(rest, " "); kv; kv = strtok(NULL, " "), count++)
		if (resident)
			check_resident(name, kv);
		else
			check_key(name, kv, keys, n, seen);
	for (size_t i = 0; i < n; i++)
		CHECK(seen[i] == 1, "%s: key %s appears %d times, want once", name, keys[i].key,
		      seen[i]);
	CHECK(count > 0, "%s: no key=value", name);
	s->layout++;
}

/*
 * One line: "<name> ok <hex> <canonical>", "<name> bad <hex> <CODE>", "<name> shm <hex> ring_size=<n>",
 * "<name> ledger <hex> <fields>" or "<name> layout - <key=value...>".
 */
static void check_line(char *line, int lineno, uint8_t *wire, struct seen *s)
{
	char *name = strtok(line, " "), *kind = strtok(NULL, " ");
	char *hex = strtok(NULL, " "), *rest = strtok(NULL, "\n");
	long n;

	if (!name || !kind || !hex || !rest) {
		CHECK(0, "line %d: want <name> <ok|bad> <hex> <expectation>", lineno);
		return;
	}
	if (!strcmp(kind, "layout")) {
		CHECK(!strcmp(hex, "-"), "line %d (%s): a layout line has no bytes: -", lineno, name);
		check_layout(name, rest, s);
		return;
	}
	n = t_unhex(hex, strlen(hex), wire, FF_MAX_MESSAGE + 1);
	CHECK(n >= 0, "line %d (%s): bad hex", lineno, name);
	if (n < 0)
		return;
	if (!strcmp(kind, "ok"))
		check_ok(name, wire, n, rest, s);
	else if (!strcmp(kind, "bad"))
		check_bad(name, wire, n, rest, s);
	else if (!strcmp(kind, "shm"))
		check_shm(name, wire, n, rest, s);
	else if (!strcmp(kind, "ledger"))
		check_ledger(name, wire, n, rest, s);
	else
		CHECK(0, "line %d (%s): kind %s is not ok, bad, shm, ledger or layout", lineno, name, kind);
}

/* A vectors file that lost its lines must not pass by checking nothing. */
static void check_coverage(const struct seen *s)
{
	CHECK(s->ok >= 10 && s->bad >= 10 && s->shm >= 1 && s->ledger >= 2 && s->layout == 4,
	      "only %d ok, %d bad, %d shm, %d ledger and %d layout vectors (want 4)", s->ok, s->bad,
	      s->shm, s->ledger, s->layout);
	for (size_t i = 0; i < sizeof(all_types); i++)
		CHECK(s->types[all_types[i]], "no ok vector of type 0x%02x", all_types[i]);
	CHECK(s->codes[FF_ERR_BADMSG] && s->codes[FF_ERR_VERSION] &&
	      s->codes[FF_ERR_UNKNOWN], "a rejection code has no vector");
}

int main(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : getenv("FF_VECTORS");
	static uint8_t wire[FF_MAX_MESSAGE + 1];
	struct seen s = { 0 };
	char *line = NULL;
	size_t cap = 0;
	int lineno = 0;
	FILE *f;

	if (!path) {
		fprintf(stderr, "give the vectors file as argument or in FF_VECTORS\n");
		return T_EXIT_FAIL;
	}
	f = fopen(path, "r");
	if (!f) {
		perror(path);
		return T_EXIT_FAIL;
	}
	while (getline(&line, &cap, f) > 0) {
		lineno++;
		line[strcspn(line, "\r\n")] = '\0';
		if (line[0] == '#' || line[0] == '\0')
			continue;
		check_line(line, lineno, wire, &s);
	}
	free(line);
	fclose(f);
	check_coverage(&s);
	printf("%d ok, %d bad, %d shm, %d ledger and %d layout vectors checked\n", s.ok, s.bad, s.shm,
	       s.ledger, s.layout);
	return t_exit_code();
}
