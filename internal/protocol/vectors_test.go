package protocol

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestVectors checks every line of docs/protocol-vectors.txt, the vectors
// the C decoder checks too: ok vectors decode to their canonical form and
// re-encode to the same bytes; bad vectors fail with exactly their code.
func TestVectors(t *testing.T) {
	f, err := os.Open("../../docs/protocol-vectors.txt")
	if err != nil {
		t.Fatalf("open shared test vectors: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n, shm, layout := 0, 0, 0
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		n++
		f := strings.Fields(text)
		if len(f) > 1 && f[1] == "shm" {
			shm++
		}
		if len(f) > 1 && f[1] == "layout" {
			layout++
		}
		checkVector(t, line, f)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 50 || shm == 0 || layout != 4 {
		t.Fatalf("only %d vectors read, %d of them shm headers and %d layouts (want 4); the file looks truncated", n, shm, layout)
	}
}

func checkVector(t *testing.T, line int, f []string) {
	t.Helper()
	if len(f) < 4 {
		t.Errorf("line %d: want <name> ok|bad <hex> <expect>, got %q", line, f)
		return
	}
	name, kind, expect := f[0], f[1], strings.Join(f[3:], " ")
	if kind == "layout" {
		checkLayout(t, name, f[3:])
		return
	}
	b, err := hex.DecodeString(f[2])
	if err != nil {
		t.Errorf("%s (line %d): bad hex: %v", name, line, err)
		return
	}
	m, err := Decode(b)
	switch kind {
	case "ok":
		if err != nil {
			t.Errorf("%s: decode failed: %v", name, err)
			return
		}
		if got := canonical(m); got != expect {
			t.Errorf("%s: canonical form\n got %s\nwant %s", name, got, expect)
		}
		if re, err := Encode(m); err != nil || !bytes.Equal(re, b) {
			t.Errorf("%s: re-encode gave %x, %v; want the original bytes", name, re, err)
		}
	case "shm":
		checkShmHeader(t, name, b, expect)
	case "ledger": // the agent's ledger reader checks these (internal/agent, TestLedgerVectors)
	case "bad":
		var pe *Error
		if !errors.As(err, &pe) {
			t.Errorf("%s: decode gave %v, %v; want error %s", name, m, err, expect)
			return
		}
		if pe.Code.String() != expect {
			t.Errorf("%s: error %s (%v), want %s", name, pe.Code, pe, expect)
		}
	default:
		t.Errorf("%s (line %d): kind %q is not ok, bad, shm, ledger or layout", name, line, kind)
	}
}

// checkShmHeader checks a shm vector: ShmHeader, which the agent writes
// into every memfd, gives exactly its bytes.
func checkShmHeader(t *testing.T, name string, want []byte, expect string) {
	t.Helper()
	var ring uint32
	if _, err := fmt.Sscanf(expect, "ring_size=%d", &ring); err != nil {
		t.Errorf("%s: want ring_size=<n>, got %q", name, expect)
		return
	}
	got, err := ShmHeader(ring)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s: ShmHeader(%d) = %x, %v; want %x", name, ring, got, err, want)
	}
}

// shmLayoutChecked are the shm-layout keys Go defines, with its values.
var shmLayoutChecked = map[string]uint64{
	"magic": ShmMagic, "version": ShmVersion, "hdr_size": ShmHeaderSize,
	"ring_min": ShmRingMin, "ring_max": ShmRingMax, "keep": ShmKeep,
}

// shmLayoutIgnored are the shm-layout keys Go does not define on purpose:
// the agent writes only the header (ShmHeader) and never maps a channel, so
// the control blocks, the shared words and the bell bytes are the
// libraries' alone (the C vector test checks them). The resume word too:
// the agent's fresh memfd has it 0, which is all a RESUME's channel needs.
var shmLayoutIgnored = []string{
	"off_switch_by", "off_offer", "off_offer_wait", "off_done", "off_done_connector", "off_done_acceptor",
	"off_resume", "resume_held_connector", "resume_held_acceptor", "resume_go", "resume_off", "resume_done_connector", "resume_done_acceptor",
	"resume_quiet_connector", "resume_quiet_acceptor",
	"off_ctl0", "off_ctl1", "ctl_head", "ctl_base", "ctl_tail", "ctl_cons_wait", "ctl_prod_wait",
	"ctl_cons_busy", "ctl_prod_shut", "ctl_cons_closed", "ctl_spill", "bell", "switch",
	"connector", "acceptor", "parked", "offer_none", "offer_offered", "offer_taken", "offer_withdrawn",
	"spill_none", "spill_used", "spill_writing", "spill_freeing",
}

// vqpLayoutChecked are the verbs-qp-layout keys Go defines, with its values.
var vqpLayoutChecked = map[string]uint64{
	"magic": VQPMagic, "version": VQPVersion, "hdr_size": VQPHeaderSize,
	"ring_min": VQPRingMin, "ring_max": VQPRingMax, "off_ring_size": VQPOffRingSize, "off_dead": VQPOffDead,
	"dead_gone": VQPDeadGone, "dead_reset": VQPDeadReset,
	"off_prod": VQPOffProd, "off_lanes": VQPOffLanes,
}

// vqpLayoutIgnored are the verbs-qp-layout keys Go does not define on
// purpose: the agent checks a QP's header, sets its dead word and reads its
// prod counter for `freeflow conns --qps`, and never reads or writes its
// ring (the providers' alone; the C vector test checks them).
var vqpLayoutIgnored = []string{
	"off_access", "off_mr_gen", "off_cons", "off_waiting", "off_armed", "off_rq_posted", "off_rnr_timer", "rec_hdr", "rec_align", "rec_len", "rec_op", "rec_flags", "rec_imm", "rec_total",
	"op_send", "op_send_imm", "op_write_imm", "op_pad", "first", "last", "solicited", "grh",
}

// checkLayout checks a layout vector: shm-layout against the constants of
// shm.go and verbs-qp-layout against verbs.go (every key either checked or
// ignored on purpose, so a new key needs a decision here), shm-resident
// against ShmResident. ledger-layout is the agent's ledger reader's
// (internal/agent, TestLedgerLayoutVector).
func checkLayout(t *testing.T, name string, kvs []string) {
	t.Helper()
	switch name {
	case "shm-layout":
		checkKeys(t, name, kvs, shmLayoutChecked, shmLayoutIgnored)
	case "verbs-qp-layout":
		checkKeys(t, name, kvs, vqpLayoutChecked, vqpLayoutIgnored)
	case "shm-resident":
		for _, kv := range kvs {
			var ring uint32
			var bytes int64
			if _, err := fmt.Sscanf(kv, "ring=%d:%d", &ring, &bytes); err != nil {
				t.Errorf("%s: %s is not ring=<n>:<bytes>", name, kv)
			} else if got := ShmResident(ring); got != bytes {
				t.Errorf("%s: ShmResident(%d) = %d, the vector says %d", name, ring, got, bytes)
			}
		}
	case "ledger-layout":
	default:
		t.Errorf("%s: a layout line is shm-layout, shm-resident, ledger-layout or verbs-qp-layout", name)
	}
}

// checkKeys checks every key=value of a layout line: each is either one Go
// defines, with its value, or one it ignores on purpose; and every key Go
// defines is there.
func checkKeys(t *testing.T, name string, kvs []string, checked map[string]uint64, ignored []string) {
	t.Helper()
	seen := map[string]bool{}
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		seen[k] = true
		if want, ok := checked[k]; ok {
			if got, err := strconv.ParseUint(v, 0, 64); err != nil || got != want {
				t.Errorf("%s: %s, but internal/protocol says %d (%#x)", name, kv, want, want)
			}
		} else if !slices.Contains(ignored, k) {
			t.Errorf("%s: key %s is neither checked nor ignored by internal/protocol; decide which", name, k)
		}
	}
	for k := range checked {
		if !seen[k] {
			t.Errorf("%s: no key %s, which internal/protocol defines", name, k)
		}
	}
}

// canonical is the canonical form of PROTOCOL.md, "Test vectors".
func canonical(m *Message) string {
	attrs := "-"
	if len(m.Attrs) > 0 {
		parts := make([]string, len(m.Attrs))
		for i, a := range m.Attrs {
			parts[i] = fmt.Sprintf("%d:%x", a.Type, a.Value)
		}
		attrs = strings.Join(parts, ",")
	}
	return fmt.Sprintf("type=0x%02x seq=%d attrs=%s", uint8(m.Type), m.Seq, attrs)
}
