package agent

import (
	"fmt"
	"testing"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/protocol"
)

// TestConnsListedInPages: a list of connections longer than one message
// holds comes a page at a time (CONNS with OFFSET, each page saying how
// many there are), and the admin client puts the pages together, every
// entry once.
func TestConnsListedInPages(t *testing.T) {
	const n = 2000 // about 270 KB of JSON
	a, _ := agentListing(t, n)
	admin := adminClient(t, a)
	got, err := admin.Conns(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if want := a.connList(); len(got) != n || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the admin client got %d entries, want the agent's %d in its order", len(got), len(want))
	}

	raw := rawAdmin(t, a)
	for _, tc := range []struct {
		offset   uint32
		min, max int
	}{{0, 400, n - 1}, {n - 10, 10, 10}, {n, 0, 0}, {1 << 31, 0, 0}} {
		page, total, err := connsFrom(raw, tc.offset)
		if err != nil || total != n || len(page) < tc.min || len(page) > tc.max {
			t.Errorf("CONNS from %d: %d entries of %d (%v); want %d to %d of %d", tc.offset, len(page), total, err, tc.min, tc.max, n)
		}
	}
}

// TestConnsPagesOfTwoClientsApart: a client that asks for the list from
// the start while another pages through it (here after every connection
// closed) does not change what the other gets: its pages still make up
// the list as it was at its first page, every entry once.
func TestConnsPagesOfTwoClientsApart(t *testing.T) {
	const n = 2000 // several pages
	a, l := agentListing(t, n)
	want := a.connList()
	first, other := rawAdmin(t, a), rawAdmin(t, a)
	got, total, err := connsFrom(first, 0)
	if err != nil || total != n || len(got) >= n {
		t.Fatalf("first page: %d entries of %d (%v); want fewer than all %d", len(got), total, err, n)
	}
	for i := range n {
		l.free(i)
	}
	if page, total, err := connsFrom(other, 0); err != nil || len(page) != 0 || total != 0 {
		t.Fatalf("the other client, after every connection closed: %d entries of %d (%v); want none", len(page), total, err)
	}
	for len(got) < n {
		page, total, err := connsFrom(first, uint32(len(got)))
		if err != nil || total != n || len(page) == 0 {
			t.Fatalf("page from %d: %d entries of %d (%v); want the rest of the first client's %d", len(got), len(page), total, err, n)
		}
		got = append(got, page...)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the first client's pages make %d entries, not the list of %d it started on", len(got), len(want))
	}
}

// agentListing starts an agent whose container web0 holds a ledger
// listing n connections, which it returns.
func agentListing(t *testing.T, n uint32) (*testAgent, *testLedger) {
	t.Helper()
	needRoot(t, "ip")
	ns := makeNetns(t) // the admin socket refuses callers in a container's namespace: not the test's
	l := newNamedLedger(t, "freeflow-ledger", ledgerHeaderSize+int64(n)*ledgerEntrySize, n, sealsAll)
	for i := range int(n) {
		l.putAnswer(i, pathUnix, 0, fmt.Sprintf("10.244.1.2:%d", 20000+i), neighbour.IP+":9000", reasonShmBudget)
	}
	holdInNetns(t, ns, l)
	return startAgent(t, newFakeDir(container("web0", "web", "10.244.1.2", ns), neighbour), nil), l
}

// rawAdmin returns a connection to a's admin socket past HELLO.
func rawAdmin(t *testing.T, a *testAgent) *protocol.Conn {
	t.Helper()
	raw := dialRaw(t, a.cfg.AdminSocket)
	if err := raw.WriteMsg(protocol.New(protocol.TypeHello, 1)); err != nil {
		t.Fatal(err)
	}
	if m, _, err := raw.ReadMsg(); err != nil || m.Type != protocol.TypeHelloReply {
		t.Fatalf("HELLO: %v, %v", m, err)
	}
	return raw
}

// connsFrom asks on raw for the page of CONNS from offset and returns it
// with the list's COUNT.
func connsFrom(raw *protocol.Conn, offset uint32) ([]agentapi.ConnInfo, uint32, error) {
	if err := raw.WriteMsg(protocol.New(protocol.TypeConns, 7, protocol.U32(protocol.AttrOffset, offset))); err != nil {
		return nil, 0, err
	}
	r, _, err := raw.ReadMsg()
	if err != nil {
		return nil, 0, err
	}
	var page []agentapi.ConnInfo
	total, err := r.U32(protocol.AttrCount)
	if err == nil {
		err = r.JSON(&page)
	}
	return page, total, err
}
