package agent

import (
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/protocol"
)

// CLOSED is a notification: the agent applies it and never answers, not
// even a refused one, so the next request on the same session reads its
// own reply, and `freeflow conns` drops the entry.
func TestClosedWithoutReply(t *testing.T) {
	a := startAgent(t, newFakeDir(ffSelf), nil)
	cli := fastPathListed(t, a, 40001)

	for _, ep := range [][2]string{
		{selfCli(40001), selfSrv},        // answered: dropped from the list
		{selfCli(40009), selfSrv},        // never answered: nothing to drop
		{"10.244.1.77:40001", selfSrv},   // another container's address: refused, silently
		{selfCli(40001), "10.1.2.3:443"}, // a tuple this end never had
	} {
		if err := cli.closed(ep[0], ep[1]); err != nil {
			t.Fatalf("send CLOSED %v: %v", ep, err)
		}
	}
	// call checks that the reply carries the LOOKUP's own seq and type.
	r, err := cli.lookup(selfIP)
	if err != nil || r.Type != protocol.TypeLookupReply {
		t.Fatalf("LOOKUP after four CLOSED: %v, %v", r, err)
	}
	cli.conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if m, _, err := cli.conn.ReadMsg(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a datagram after the LOOKUP's reply: %v, %v; CLOSED must not be answered", m, err)
	}
	got := a.live.list()
	if len(got) != 1 || got[0].Local != selfSrv {
		t.Errorf("conns after CLOSED of the connecting end: %+v, want only the accepting end", got)
	}
}

// A CLOSED whose refusal closes the connection (here: before HELLO)
// closes it without an ERROR, which the client would read as the answer
// to its next request.
func TestClosedBeforeHelloClosesWithoutReply(t *testing.T) {
	a := startAgent(t, newFakeDir(ffSelf), nil)
	c := dialRaw(t, a.cfg.LibrarySocket())
	sendBytes(t, c, encode(t, protocol.New(protocol.TypeClosed, 3,
		protocol.Endpoint(protocol.AttrLocalEndpoint, netip.MustParseAddrPort(selfCli(1))),
		protocol.Endpoint(protocol.AttrRemoteEndpoint, netip.MustParseAddrPort(selfSrv)))))
	wantClosed(t, c)
}
