package agent

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
)

// pooledPorts returns the local ports of a's pooled connections to h.
func pooledPorts(a *testAgent, h directory.Host) []int {
	a.pool.mu.Lock()
	defer a.pool.mu.Unlock()
	var ports []int
	for _, pc := range a.pool.idle[h.FabricIP] {
		if stillOpen(pc.c) {
			ports = append(ports, pc.c.LocalAddr().(*net.TCPAddr).Port)
		}
	}
	return ports
}

// fillPool makes one cross-host connection (which dials, and asks for a
// refill) and waits until h1 keeps poolSize open connections to h2.
func fillPool(t *testing.T, hs twoHosts, cport int) []int {
	t.Helper()
	con, acc := bothAsk(t, hs, cport)
	closeFD(con.FD)
	closeFD(acc.FD)
	if con.Kind != pathHostTCP || acc.Kind != pathHostTCP {
		t.Fatalf("first connection: connect %+v, accept %+v; want host-tcp", con, acc)
	}
	h2, _ := hs.h1.hostRecord("h2")
	waitFor(t, "h1's pool to h2 filled", func() bool { return len(pooledPorts(hs.h1, h2)) == poolSize })
	return pooledPorts(hs.h1, h2)
}

// wantHostTCP makes a cross-host connection and checks both ends got
// host-tcp on one working TCP connection; it returns the connector's
// local fabric port.
func wantHostTCP(t *testing.T, hs twoHosts, cport int) int {
	t.Helper()
	var port int
	withHostTCP(t, hs, cport, func(con, _ pathResult) {
		local, remote := sockAddrs(t, con.FD)
		if remote.Addr().String() != hs.h2.cfg.FabricIP {
			t.Fatalf("the connector's end leads to %v, not to h2's fabric address", remote)
		}
		port = int(local.Port())
	})
	return port
}

// A cross-host connection made while the pool is full goes on a pooled
// connection, which becomes its data path.
func TestOfferOnPooledConnection(t *testing.T) {
	hs := startTwoHosts(t, nil)
	if err := newLib(t, hs.h2).listen(srv2); err != nil {
		t.Fatal(err)
	}
	pooled := fillPool(t, hs, 43300)
	if port := wantHostTCP(t, hs, 43301); !slices.Contains(pooled, port) {
		t.Errorf("the connection's fabric port %d is none of the pooled ones %v", port, pooled)
	}
}

// The peer agent restarts: the pooled connections it closed are not
// used, the next connection still gets host-tcp on a new connection, and
// the pool is refilled with connections to the new agent.
func TestDeadPooledConnectionReplaced(t *testing.T) {
	hs := startTwoHosts(t, nil)
	if err := newLib(t, hs.h2).listen(srv2); err != nil {
		t.Fatal(err)
	}
	old := fillPool(t, hs, 43310)
	hs.h2.stop()
	hs.h2 = startAgent(t, hs.dir, func(c *Config) {
		c.Host, c.Subnet, c.FabricIP = "h2", "10.244.2.0/24", hs.h2.cfg.FabricIP
	})
	waitFor(t, "the new h2 agent holds the key", func() bool { return hs.h2.clusterKey() != nil })
	if err := newLib(t, hs.h2).listen(srv2); err != nil {
		t.Fatal(err)
	}
	if port := wantHostTCP(t, hs, 43311); slices.Contains(old, port) {
		t.Errorf("the connection went on pooled port %d, closed by the old agent", port)
	}
	h2, _ := hs.h1.hostRecord("h2")
	waitFor(t, "h1's pool to h2 refilled", func() bool {
		now := pooledPorts(hs.h1, h2)
		return len(now) == poolSize && !slices.ContainsFunc(now, func(p int) bool { return slices.Contains(old, p) })
	})
}

// A pooled connection that looks open but resets when the OFFER arrives
// (the peer agent went away that instant) costs a retry on a fresh
// connection within the budget, not the fast path.
func TestPooledConnectionResetOnOfferRetried(t *testing.T) {
	hs := startTwoHosts(t, nil)
	if err := newLib(t, hs.h2).listen(srv2); err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.ParseIP(hs.h1.cfg.FabricIP)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	gotOffer := make(chan int, 1)
	go func() {
		c, err := ln.AcceptTCP()
		if err != nil {
			gotOffer <- 0
			return
		}
		n, _ := c.Read(make([]byte, 512))
		c.SetLinger(0) // close with a reset
		c.Close()
		gotOffer <- n
	}()
	c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	h2, _ := hs.h1.hostRecord("h2")
	hs.h1.pool.mu.Lock()
	hs.h1.pool.idle[h2.FabricIP] = []pooledConn{{c: c, at: time.Now()}}
	hs.h1.pool.mu.Unlock()
	wantHostTCP(t, hs, 43320)
	if n := <-gotOffer; n == 0 {
		t.Errorf("the injected pooled connection never carried the OFFER: the retry went untested")
	}
}

// offerFor is an OFFER for cport -> srv2 from h1, signed with key.
func offerFor(t *testing.T, key []byte, cport int) *protocol.Message {
	t.Helper()
	m := protocol.New(protocol.TypeOffer, 1,
		protocol.Endpoint(protocol.AttrLocalEndpoint, netip.MustParseAddrPort(selfCli(cport))),
		protocol.Endpoint(protocol.AttrRemoteEndpoint, netip.MustParseAddrPort(srv2)),
		protocol.String(protocol.AttrHost, "h1"), newNonce(), timeAttr(time.Now()))
	if err := sign(key, m); err != nil {
		t.Fatal(err)
	}
	return m
}

// A pooled connection is authenticated twice: its HELLO, and then the
// OFFER it carries, each with its own MAC, time and nonce.
func TestPooledOfferAuthenticated(t *testing.T) {
	hs := startTwoHosts(t, nil)
	if err := newLib(t, hs.h2).listen(srv2); err != nil {
		t.Fatal(err)
	}
	h2, _ := hs.h1.hostRecord("h2")
	key, wrongKey := hs.h1.clusterKey(), make([]byte, 32)
	standby := func() *net.TCPConn {
		c, err := hs.h1.dialStandby(h2)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// An OFFER with a wrong MAC on an authenticated pooled connection.
	if got := sendOfferOn(t, standby(), offerFor(t, wrongKey, 43330)); !strings.HasPrefix(got, "DENIED") {
		t.Errorf("forged OFFER on a pooled connection: %s, want DENIED", got)
	}
	// A genuine one is answered (overlay: no ACCEPT comes), its replay on
	// another pooled connection refused.
	genuine := offerFor(t, key, 43331)
	if got := sendOfferOn(t, standby(), genuine); got != "PATH overlay "+reasonTimeout {
		t.Errorf("genuine OFFER on a pooled connection: %s", got)
	}
	if got := sendOfferOn(t, standby(), genuine); !strings.HasPrefix(got, "DENIED") {
		t.Errorf("replayed OFFER on a pooled connection: %s, want DENIED", got)
	}
	// A HELLO with a wrong MAC: refused at once, no OFFER is waited for.
	hello := protocol.New(protocol.TypeHello, 1, protocol.String(protocol.AttrHost, "h1"), newNonce(), timeAttr(time.Now()))
	if err := sign(wrongKey, hello); err != nil {
		t.Fatal(err)
	}
	if got := sendOffer(t, hs, hello); !strings.HasPrefix(got, "DENIED") {
		t.Errorf("forged HELLO: %s, want DENIED", got)
	}
	// Nothing was decided for the forged tuple.
	if r, _ := newLib(t, hs.h2).accept(srv2, selfCli(43330)); r.Reason != reasonTimeout {
		t.Errorf("after the forged offer: %+v", r)
	}
}

// One host keeps at most maxStandbyPerHost pooled connections waiting on
// another's agent; one more is refused.
func TestStandbyBoundedPerHost(t *testing.T) {
	hs := startTwoHosts(t, nil)
	h2, _ := hs.h1.hostRecord("h2")
	var conns []*net.TCPConn
	for range maxStandbyPerHost + 1 {
		c, err := hs.h1.dialStandby(h2)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	// Read all at once: a deadline that passed makes a read fail even on
	// data that is there.
	refused := make(chan bool, len(conns))
	until := time.Now().Add(500 * time.Millisecond)
	for _, c := range conns {
		go func() {
			c.SetReadDeadline(until)
			r, err := readFrame(c)
			switch {
			case err == nil && r.Err() != nil && r.Err().Code == protocol.CodeDenied:
			case err == nil:
				t.Errorf("a pooled connection got %v before any OFFER", r.Type)
			case !errors.Is(err, os.ErrDeadlineExceeded):
				t.Errorf("a pooled connection ended before any OFFER: %v", err)
			}
			refused <- err == nil
		}()
	}
	n := 0
	for range conns {
		if <-refused {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d of %d pooled connections refused, want 1 (the bound is %d)", n, len(conns), maxStandbyPerHost)
	}
}
