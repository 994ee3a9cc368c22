package agent

import (
	"fmt"
	"testing"

	"github.com/freeflow-net/freeflow/internal/protocol"
)

// TestConnsListedInPages: a list of connections longer than one message
// holds comes a page at a time (CONNS with OFFSET, each page saying how
// many there are), and the admin client puts the pages together, every
// entry once.
func TestConnsListedInPages(t *testing.T) {
	const n = 2000 // about 270 KB of JSON
	needRoot(t, "ip")
	ns := makeNetns(t) // the admin socket refuses callers in a container's namespace: not the test's
	l := newNamedLedger(t, "freeflow-ledger", ledgerHeaderSize+n*ledgerEntrySize, n, sealsAll)
	for i := range n {
		l.putAnswer(i, pathUnix, 0, fmt.Sprintf("10.244.1.2:%d", 20000+i), neighbour.IP+":9000", reasonShmBudget)
	}
	holdInNetns(t, ns, l)
	a := startAgent(t, newFakeDir(container("web0", "web", "10.244.1.2", ns), neighbour), nil)
	admin := adminClient(t, a)
	got, err := admin.Conns(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if want := a.connList(); len(got) != n || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the admin client got %d entries, want the agent's %d in its order", len(got), len(want))
	}

	raw := dialRaw(t, a.cfg.AdminSocket)
	if err := raw.WriteMsg(protocol.New(protocol.TypeHello, 1)); err != nil {
		t.Fatal(err)
	}
	if m, _, err := raw.ReadMsg(); err != nil || m.Type != protocol.TypeHelloReply {
		t.Fatalf("HELLO: %v, %v", m, err)
	}
	for _, tc := range []struct {
		offset   uint32
		min, max int
	}{{0, 400, n - 1}, {n - 10, 10, 10}, {n, 0, 0}, {1 << 31, 0, 0}} {
		if err := raw.WriteMsg(protocol.New(protocol.TypeConns, 7, protocol.U32(protocol.AttrOffset, tc.offset))); err != nil {
			t.Fatal(err)
		}
		r, _, err := raw.ReadMsg()
		if err != nil {
			t.Fatal(err)
		}
		var page []ConnInfo
		total, err := r.U32(protocol.AttrCount)
		if err != nil || r.JSON(&page) != nil || total != n || len(page) < tc.min || len(page) > tc.max {
			t.Errorf("CONNS from %d: %d entries of %d (%v); want %d to %d of %d", tc.offset, len(page), total, err, tc.min, tc.max, n)
		}
	}
}
