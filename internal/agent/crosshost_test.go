package agent

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
)

// Cross-host brokering in one process: two agents, hosts h1 and h2, whose
// "fabric" addresses are two loopback addresses, share one directory. The
// test process is container self on h1 (to h1's agent) and container
// self2 on h2 (to h2's agent), so it plays both libraries.

var ffSelf2 = directory.Container{
	ID: "self2", Name: "self2", Host: "h2", IP: "10.244.2.9", Tenant: "blue", NetNS: "/proc/self/ns/net", FreeFlow: true,
}

const (
	srv2 = "10.244.2.9:5201"
)

type twoHosts struct {
	h1, h2 *testAgent
	dir    *fakeDir
}

// startTwoHosts starts both agents on random loopback fabric addresses;
// mod, if not nil, changes both configurations.
func startTwoHosts(t *testing.T, mod func(*Config)) twoHosts {
	t.Helper()
	dir := newFakeDir(ffSelf, ffSelf2)
	base := fmt.Sprintf("127.%d.%d.", 1+rand.IntN(250), 1+rand.IntN(250))
	h1 := startAgent(t, dir, func(c *Config) {
		c.FabricIP = base + "1"
		if mod != nil {
			mod(c)
		}
	})
	h2 := startAgent(t, dir, func(c *Config) {
		c.Host, c.Subnet, c.FabricIP = "h2", "10.244.2.0/24", base+"2"
		if mod != nil {
			mod(c)
		}
	})
	for _, a := range []*testAgent{h1, h2} {
		if a.broker == nil {
			t.Fatalf("agent %s has no broker port: %s", a.cfg.Host, a.brokerErr)
		}
		holdLedger(t, a)
	}
	waitFor(t, "both agents registered and hold the key", func() bool {
		_, ok1 := h1.hostRecord("h2")
		_, ok2 := h2.hostRecord("h1")
		return ok1 && ok2 && h1.clusterKey() != nil && h2.clusterKey() != nil
	})
	return twoHosts{h1: h1, h2: h2, dir: dir}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 250 {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting until %s", what)
}

// bothAsk sends CONNECT to h1 and ACCEPT to h2 at the same time.
func bothAsk(t *testing.T, hs twoHosts, cport int) (con, acc pathResult) {
	t.Helper()
	cli, srv := newLib(t, hs.h1), newLib(t, hs.h2)
	return meet(t, srv, cli, selfCli(cport), srv2)
}

// withHostTCP makes a cross-host connection, checks both ends got host-tcp
// on one working TCP connection, runs f on the two ends and closes them.
func withHostTCP(t *testing.T, hs twoHosts, cport int, f func(con, acc pathResult)) {
	t.Helper()
	con, acc := bothAsk(t, hs, cport)
	defer closeFD(con.FD)
	defer closeFD(acc.FD)
	if con.Kind != pathHostTCP || acc.Kind != pathHostTCP {
		t.Fatalf("connect %+v, accept %+v; want host-tcp for both", con, acc)
	}
	if err := exchange(con.FD, acc.FD); err != nil {
		t.Fatalf("the two ends are not one TCP connection: %v", err)
	}
	f(con, acc)
}

func TestCrossHostHostTCP(t *testing.T) {
	hs := startTwoHosts(t, nil)
	if err := newLib(t, hs.h2).listen("0.0.0.0:5201"); err != nil {
		t.Fatal(err)
	}
	withHostTCP(t, hs, 43000, func(con, acc pathResult) {
		// The handed sockets connect the fabric addresses (the library
		// hides them from the application).
		cl, cr := sockAddrs(t, con.FD)
		al, ar := sockAddrs(t, acc.FD)
		if cl.Addr().String() != hs.h1.cfg.FabricIP || cr.Addr().String() != hs.h2.cfg.FabricIP || cl != ar || cr != al {
			t.Errorf("connector %v -> %v, acceptor %v -> %v; want h1's fabric address to h2's", cl, cr, al, ar)
		}
		if got := hs.h1.live.list(); len(got) != 1 || got[0].Path != "host-tcp" || got[0].RemoteContainer != "self2" {
			t.Errorf("h1's conns: %+v", got)
		}
	})
}

// A connection whose 4-tuple an earlier one across hosts had (the swap
// reset the first one's overlay socket, freeing its port, and the client
// got it again within seconds) meets afresh on the connector's agent too,
// where the acceptor never asks: host-tcp again, not the first one's
// record (which answered PATH host-tcp without a descriptor).
func TestCrossHostReusedTupleMeetsAfresh(t *testing.T) {
	hs := startTwoHosts(t, nil)
	if err := newLib(t, hs.h2).listen("0.0.0.0:5201"); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		withHostTCP(t, hs, 43010, func(con, acc pathResult) {
			if con.FD < 0 || acc.FD < 0 {
				t.Errorf("connection %d on the same 4-tuple: connect %+v, accept %+v; want a descriptor each", i+1, con, acc)
			}
		})
	}
}

func sockAddrs(t *testing.T, fd int) (local, remote netip.AddrPort) {
	t.Helper()
	f := func(sa syscall.Sockaddr, err error) netip.AddrPort {
		if err != nil {
			t.Fatal(err)
		}
		in, ok := sa.(*syscall.SockaddrInet4)
		if !ok {
			t.Fatalf("socket address %T is not IPv4", sa)
		}
		return netip.AddrPortFrom(netip.AddrFrom4(in.Addr), uint16(in.Port))
	}
	return f(syscall.Getsockname(fd)), f(syscall.Getpeername(fd))
}

// Overlay reasons across hosts: the acceptor's agent decides and both ends
// agree; one side alone is bounded; a stopped peer agent costs nothing.
func TestCrossHostFallbacks(t *testing.T) {
	hs := startTwoHosts(t, nil)
	// No listener registered on h2: the connector learns it from h2's
	// reply, the acceptor from the recorded decision.
	con, acc := bothAsk(t, hs, 43100)
	if con.Reason != reasonNoListener || acc.Reason != reasonNoListener {
		t.Errorf("without a listener: connect %+v, accept %+v", con, acc)
	}
	if err := newLib(t, hs.h2).listen(srv2); err != nil {
		t.Fatal(err)
	}
	// Connector alone: h2 waits offerWait for its ACCEPT.
	r, err := newLib(t, hs.h1).connect(selfCli(43101), srv2)
	if err != nil || r.Reason != reasonTimeout || r.Elapsed > offerBudget+slackMax {
		t.Errorf("connect alone: %+v, %v; want %s within %v", r, err, reasonTimeout, offerBudget)
	}
	// Acceptor alone.
	r, err = newLib(t, hs.h2).accept(srv2, selfCli(43102))
	if err != nil || r.Reason != reasonTimeout || r.Elapsed < meetWait || r.Elapsed > meetWait+slackMax {
		t.Errorf("accept alone: %+v, %v; want %s after %v", r, err, reasonTimeout, meetWait)
	}
	// Peer agent down: overlay at once.
	hs.h2.stop()
	r, err = newLib(t, hs.h1).connect(selfCli(43103), srv2)
	if err != nil || r.Kind != pathOverlay || r.Reason != reasonUnreachable || r.Elapsed > offerBudget+slackMax {
		t.Errorf("peer agent down: %+v, %v; want %s within %v", r, err, reasonUnreachable, offerBudget)
	}
}

// An OFFER that does not carry a valid MAC under the cluster key gets
// ERROR DENIED and the connection closed; a replayed one too.
func TestForgedOfferRefused(t *testing.T) {
	hs := startTwoHosts(t, nil)
	if err := newLib(t, hs.h2).listen(srv2); err != nil {
		t.Fatal(err)
	}
	offer := func(key []byte, nonce protocol.Attr) *protocol.Message {
		m := protocol.New(protocol.TypeOffer, 1,
			protocol.Endpoint(protocol.AttrLocalEndpoint, netip.MustParseAddrPort(selfCli(43200))),
			protocol.Endpoint(protocol.AttrRemoteEndpoint, netip.MustParseAddrPort(srv2)),
			protocol.String(protocol.AttrHost, "h1"), nonce, timeAttr(time.Now()))
		if err := sign(key, m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	wrongKey := make([]byte, 32)
	good := newNonce()
	for name, m := range map[string]*protocol.Message{
		"wrong key": offer(wrongKey, newNonce()),
		"unsigned":  protocol.New(protocol.TypeOffer, 1, protocol.String(protocol.AttrHost, "h1")),
		"not OFFER": protocol.New(protocol.TypeHello, 1),
	} {
		if got := sendOffer(t, hs, m); !strings.HasPrefix(got, "DENIED") {
			t.Errorf("%s: %s, want DENIED", name, got)
		}
	}
	// A genuine offer is answered (overlay: no ACCEPT comes), its replay refused.
	genuine := offer(hs.h1.clusterKey(), good)
	if got := sendOffer(t, hs, genuine); got != "PATH overlay "+reasonTimeout {
		t.Errorf("genuine offer: %s", got)
	}
	if got := sendOffer(t, hs, genuine); !strings.HasPrefix(got, "DENIED") {
		t.Errorf("replayed offer: %s, want DENIED", got)
	}
	// Nothing was decided for the forged tuples.
	if r, _ := newLib(t, hs.h2).accept(srv2, selfCli(43200)); r.Reason != reasonTimeout {
		t.Errorf("after the forged offers: %+v", r)
	}
}

// sendOffer sends m to h2's broker port from h1's fabric address and
// describes the answer, checking the connection is closed after it.
func sendOffer(t *testing.T, hs twoHosts, m *protocol.Message) string {
	t.Helper()
	h2, _ := hs.h1.hostRecord("h2")
	c, err := hs.h1.dialBroker(h2, time.Now().Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return sendOfferOn(t, c, m)
}

// sendOfferOn sends m on c, to h2's broker port, and describes the answer
// as sendOffer does.
func sendOfferOn(t *testing.T, c *net.TCPConn, m *protocol.Message) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if err := writeFrame(c, m); err != nil {
		t.Fatal(err)
	}
	r, err := readFrame(c)
	if err != nil {
		return "no reply: " + err.Error()
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Errorf("the broker sent more than one message")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Errorf("the broker left the connection open after its answer")
	}
	if e := r.Err(); e != nil {
		return e.Code.String() + " " + e.Msg()
	}
	kind, _ := r.Get(protocol.AttrPathKind)
	reason, _ := r.String(protocol.AttrReason)
	return fmt.Sprintf("PATH %s %s", pathName(kind[0]), reason)
}

// Across hosts too: the OFFER says whether the connecting library marks
// its SYNs (CAPS bit 3); one that does not gets the overlay at once
// (old-library) from a listener whose libraries all do, instead of the
// acceptor's agent's wait for an ACCEPT that will not come.
func TestOldConnectorLibraryTakesOverlayAtOnceCrossHost(t *testing.T) {
	hs := startTwoHosts(t, nil)
	if err := newLibCaps(t, hs.h2, protocol.CapSynMark).listen(srv2); err != nil {
		t.Fatal(err)
	}
	r, err := newLib(t, hs.h1).connect(selfCli(43301), srv2)
	if err != nil || r.Kind != pathOverlay || r.Reason != reasonOldLibrary || r.Elapsed >= offerWait {
		t.Errorf("old library: %+v, %v; want overlay %s at once", r, err, reasonOldLibrary)
	}
	r, err = newLibCaps(t, hs.h1, protocol.CapSynMark).connect(selfCli(43302), srv2)
	if err != nil || r.Reason != reasonTimeout || r.Elapsed < offerWait {
		t.Errorf("marking library: %+v, %v; want its ACCEPT waited for (%s)", r, err, reasonTimeout)
	}
}
