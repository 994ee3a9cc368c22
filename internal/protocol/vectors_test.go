package protocol

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
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
	n, shm := 0, 0
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
		checkVector(t, line, f)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 50 || shm == 0 {
		t.Fatalf("only %d vectors read, %d of them shm headers; the file looks truncated", n, shm)
	}
}

func checkVector(t *testing.T, line int, f []string) {
	t.Helper()
	if len(f) < 4 {
		t.Errorf("line %d: want <name> ok|bad <hex> <expect>, got %q", line, f)
		return
	}
	name, kind, expect := f[0], f[1], strings.Join(f[3:], " ")
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
		t.Errorf("%s (line %d): kind %q is not ok, bad, shm or ledger", name, line, kind)
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
