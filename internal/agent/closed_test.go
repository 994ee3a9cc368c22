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
	wantNoReplies(t, cli)
	got := a.live.list()
	if len(got) != 1 || got[0].Local != selfSrv {
		t.Errorf("conns after CLOSED of the connecting end: %+v, want only the accepting end", got)
	}
}

// wantNoReplies has l ask a LOOKUP and checks that its reply is the only
// datagram to read: the notifications l sent before it were applied (one
// session is served in order) and not answered. call checks that the
// reply carries the LOOKUP's own seq and type.
func wantNoReplies(t *testing.T, l *libClient) {
	t.Helper()
	r, err := l.lookup(selfIP)
	if err != nil || r.Type != protocol.TypeLookupReply {
		t.Fatalf("LOOKUP after notifications: %v, %v", r, err)
	}
	l.conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if m, _, err := l.conn.ReadMsg(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a datagram after the LOOKUP's reply: %v, %v; notifications must not be answered", m, err)
	}
}

// A CLOSED or LEDGER whose refusal closes the connection (here: before
// HELLO) closes it without an ERROR, which the client would read as the
// answer to its next request.
func TestNotificationBeforeHelloClosesWithoutReply(t *testing.T) {
	a := startAgent(t, newFakeDir(ffSelf), nil)
	for _, m := range []*protocol.Message{
		protocol.New(protocol.TypeClosed, 3,
			protocol.Endpoint(protocol.AttrLocalEndpoint, netip.MustParseAddrPort(selfCli(1))),
			protocol.Endpoint(protocol.AttrRemoteEndpoint, netip.MustParseAddrPort(selfSrv))),
		protocol.New(protocol.TypeLedger, 3),
	} {
		c := dialRaw(t, a.cfg.LibrarySocket())
		sendBytes(t, c, encode(t, m))
		wantClosed(t, c)
	}
}
