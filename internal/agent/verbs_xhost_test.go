package agent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/policy"
	"github.com/freeflow-net/freeflow/internal/protocol"
	"golang.org/x/sys/unix"
)

// Verbs QPs across hosts: the test process is container self on h1 and
// self2 on h2 (crosshost_test.go), so it plays both providers.

// self2LID is the LID of ffSelf2's verbs port (10.244.2.9).
const self2LID = 0x0209

// askQPAcross asks VERBS_CONNECT of QP qpn of l to peer on another host and
// returns the socket of their connection, which the caller closes, or the
// agent's error.
func askQPAcross(l *libClient, qpn uint32, peer protocol.VerbsPeer) (int, error) {
	r, fds, err := l.call(protocol.New(protocol.TypeVerbsConnect, 0, protocol.U32(protocol.AttrQPN, qpn), peer.Attr()))
	if err != nil {
		return -1, err
	}
	pq, err1 := r.U32(protocol.AttrQPN)
	q, err2 := r.VerbsQP()
	kind, err3 := r.U8(protocol.AttrPathKind)
	if r.Type != protocol.TypeVerbsPeerQP || len(fds) != 1 || err1 != nil || err2 != nil || err3 != nil ||
		pq != peer.QPN || q != (protocol.VerbsQP{Type: protocol.QPTypeRC}) || kind != pathHostTCP {
		protocol.CloseFDs(fds)
		return -1, fmt.Errorf("VERBS_CONNECT across hosts answered %v with %d fds, QPN %#x (%v), VERBS_QP %+v (%v), PATH_KIND %d (%v); want VERBS_PEER_QP of QP %#x, RC, PD 0, host-tcp, one fd",
			r.Type, len(fds), pq, err1, q, err2, kind, err3, peer.QPN)
	}
	return fds[0], nil
}

// askUntilConnected is askQPAcross asked again every millisecond while the
// answer is NOTFOUND, for 3 s at most, as a provider asks.
func askUntilConnected(l *libClient, qpn uint32, peer protocol.VerbsPeer) (int, error) {
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(time.Millisecond) {
		fd, err := askQPAcross(l, qpn, peer)
		if pe, ok := err.(*protocol.Error); !ok || pe.Code != protocol.CodeNotFound || time.Now().After(deadline) {
			return fd, err
		}
	}
}

// connectUntilConnected is askUntilConnected for the test goroutine: the
// socket is closed when the test ends.
func connectUntilConnected(t *testing.T, l *libClient, qpn uint32, peer protocol.VerbsPeer) (int, error) {
	t.Helper()
	fd, err := askUntilConnected(l, qpn, peer)
	if err == nil {
		t.Cleanup(func() { closeFD(fd) })
	}
	return fd, err
}

// connectAcross is askQPAcross for the test goroutine: the socket is closed
// when the test ends.
func connectAcross(t *testing.T, l *libClient, qpn uint32, peer protocol.VerbsPeer) (int, error) {
	t.Helper()
	fd, err := askQPAcross(l, qpn, peer)
	if err == nil {
		t.Cleanup(func() { closeFD(fd) })
	}
	return fd, err
}

// pairing returns a copy of the cross-host pairing of QP qpn at agent a.
func pairing(a *testAgent, qpn uint32) xpair {
	a.verbs.mu.Lock()
	defer a.verbs.mu.Unlock()
	if qp := a.verbs.qps[qpn]; qp != nil {
		return qp.x
	}
	return xpair{parked: -1}
}

// nothingParked fails the test if QP qpn at agent a holds or made a
// connection.
func nothingParked(t *testing.T, a *testAgent, qpn uint32, after string) {
	t.Helper()
	if x := pairing(a, qpn); x.parked >= 0 || x.paired {
		t.Errorf("after %s, QP %#x at %s: parked fd %d, paired %v; want no connection", after, qpn, a.cfg.Host, x.parked, x.paired)
	}
}

// oneConnection fails the test unless fds a and b are the two ends of one
// TCP connection between the two hosts' fabric addresses, carrying bytes
// both ways.
func oneConnection(t *testing.T, hs twoHosts, a, b int) {
	t.Helper()
	al, ar := sockAddrs(t, a)
	bl, br := sockAddrs(t, b)
	if al != br || ar != bl || al.Addr().String() != hs.h1.cfg.FabricIP || ar.Addr().String() != hs.h2.cfg.FabricIP {
		t.Fatalf("h1's end %v -> %v, h2's end %v -> %v; want the two ends of one connection from h1's fabric address to h2's", al, ar, bl, br)
	}
	if err := exchange(a, b); err != nil {
		t.Fatalf("the two ends carry no bytes: %v", err)
	}
}

// pairAcross connects QP qa of l1 (h1) and QP qb of l2 (h2), qb first, and
// returns their ends.
func pairAcross(t *testing.T, l1, l2 *libClient, qa, qb uint32) (int, int) {
	t.Helper()
	_, err := connectAcross(t, l2, qb, lidPeer(qa, selfLID))
	wantCode(t, err, protocol.CodeNotFound)
	fa, err := connectAcross(t, l1, qa, lidPeer(qb, self2LID))
	if err != nil {
		t.Fatalf("the second QP of the pair: %v", err)
	}
	fb, err := connectUntilConnected(t, l2, qb, lidPeer(qa, selfLID))
	if err != nil {
		t.Fatalf("the first QP, asking again: %v", err)
	}
	return fa, fb
}

// The first QP of a pair to connect gets NOTFOUND (the other does not want
// it yet); the second gets its end of a new connection; the first's
// doorbell rings and its next VERBS_CONNECT gets the other end, marked as
// a handed fabric connection.
func TestVerbsCrossHostFirstConnectWaitsThenGetsTheParkedEnd(t *testing.T) {
	hs := startTwoHosts(t, nil)
	l1, l2 := newLib(t, hs.h1), newLib(t, hs.h2)
	qa, _ := newQP(t, l1, 1)
	qb, bell := newBelledQP(t, l2)
	_, err := connectAcross(t, l2, qb, lidPeer(qa, selfLID))
	wantCode(t, err, protocol.CodeNotFound)
	fa, err := connectAcross(t, l1, qa, lidPeer(qb, self2LID))
	if err != nil {
		t.Fatalf("the second QP of the pair: %v", err)
	}
	waitRing(t, bell, "the first QP's end parked")
	fb, err := connectAcross(t, l2, qb, lidPeer(qa, selfLID))
	if err != nil {
		t.Fatalf("the first QP, rung, asking again: %v", err)
	}
	oneConnection(t, hs, fa, fb)
	for _, fd := range []int{fa, fb} {
		if mark, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_MARK); err != nil || mark != fabricMarkConnected {
			t.Errorf("a handed end has mark %#x (%v); want %#x, a handed connection", mark, err, fabricMarkConnected)
		}
	}
	if x := pairing(hs.h2, qb); !x.paired || x.parked >= 0 {
		t.Errorf("h2's QP after handing its end: %+v", x)
	}
}

// Both QPs connect at once, each asking again every millisecond as a
// provider does: exactly one connection is made and each gets one end of
// it, whichever offer crosses which.
func TestVerbsCrossHostSimultaneousConnectsMakeOneConnection(t *testing.T) {
	hs := startTwoHosts(t, nil)
	l1, l2 := newLib(t, hs.h1), newLib(t, hs.h2)
	for round := range 30 {
		qa, _ := newQP(t, l1, 1)
		qb, _ := newQP(t, l2, 1)
		var fds [2]int
		var errs [2]error
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, ask := range []struct {
			l    *libClient
			qpn  uint32
			peer protocol.VerbsPeer
		}{{l1, qa, lidPeer(qb, self2LID)}, {l2, qb, lidPeer(qa, selfLID)}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				fds[i], errs[i] = askUntilConnected(ask.l, ask.qpn, ask.peer)
			}()
		}
		close(start)
		wg.Wait()
		t.Cleanup(func() { closeFD(fds[0]); closeFD(fds[1]) })
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("round %d: h1's QP: %v; h2's QP: %v", round, errs[0], errs[1])
		}
		oneConnection(t, hs, fds[0], fds[1])
		for _, a := range []*testAgent{hs.h1, hs.h2} {
			for _, q := range []uint32{qa, qb} {
				if x := pairing(a, q); x.parked >= 0 {
					t.Fatalf("round %d: QP %#x at %s holds a second connection, parked", round, q, a.cfg.Host)
				}
			}
		}
	}
}

// A QP's program that resets it and connects it again gets a new
// connection, once the other end has done so too; until then the other
// QP, paired, refuses it.
func TestVerbsCrossHostReconnectMakesANewConnection(t *testing.T) {
	hs := startTwoHosts(t, nil)
	l1, l2 := newLib(t, hs.h1), newLib(t, hs.h2)
	qa, _ := newQP(t, l1, 1)
	qb, _ := newQP(t, l2, 1)
	oldA, _ := pairAcross(t, l1, l2, qa, qb)
	_, err := connectAcross(t, l1, qa, lidPeer(qb, self2LID))
	wantCode(t, err, protocol.CodeNotFound) // qb is paired still
	fb, err := connectAcross(t, l2, qb, lidPeer(qa, selfLID))
	if err != nil {
		t.Fatalf("the other QP, connecting again: %v", err)
	}
	fa, err := connectUntilConnected(t, l1, qa, lidPeer(qb, self2LID))
	if err != nil {
		t.Fatalf("the first QP, asking again: %v", err)
	}
	oneConnection(t, hs, fa, fb)
	oldEnd, _ := sockAddrs(t, oldA)
	if newEnd, _ := sockAddrs(t, fa); newEnd == oldEnd {
		t.Errorf("the new connection is the old one (%v)", newEnd)
	}
}

// The tenant policy applies across hosts as on one: the caller's agent
// refuses a container it may not reach (DENIED), the peer's agent refuses
// an offer from one, and a refusal by policy there is DENIED too.
func TestVerbsCrossHostDeniedAcrossTenants(t *testing.T) {
	hs := startTwoHosts(t, nil)
	red1 := addRedTenant(t, hs)
	l1, l2 := newLib(t, hs.h1), newLib(t, hs.h2)
	qa, _ := newQP(t, l1, 1)
	_, err := connectAcross(t, l1, qa, lidPeer(1, red2LID))
	wantCode(t, err, protocol.CodeDenied)

	qb, _ := newQP(t, l2, 1)
	m := verbsOfferMsg(t, hs.h1.clusterKey(), "h1", red1.IP, 1, lidPeer(qb, self2LID))
	if got := sendOffer(t, hs, m); got != "PATH overlay "+policy.ReasonTenantDiffers {
		t.Errorf("an offer from a container of another tenant: %s", got)
	}
	nothingParked(t, hs.h2, qb, "an offer across tenants")

	hs.h1.verbs.mu.Lock()
	own := hs.h1.verbs.qps[qa]
	hs.h1.verbs.mu.Unlock()
	_, err = hs.h1.verbs.offered(own, remoteQP{c: ffSelf2, qpn: qb}, overlay(policy.ReasonTenantDiffers), -1)
	wantCode(t, err, protocol.CodeDenied)
}

// red2LID is the LID of the container addRedTenant puts on h2.
const red2LID = 0x021e

// addRedTenant puts a container of tenant red on each host, which the
// test's containers (tenant blue) may not reach, and returns h1's.
func addRedTenant(t *testing.T, hs twoHosts) directory.Container {
	t.Helper()
	red1 := directory.Container{ID: "red1", Name: "red1", Host: "h1", IP: "10.244.1.30", Tenant: "red", NetNS: "/nonexistent"}
	red2 := directory.Container{ID: "red2", Name: "red2", Host: "h2", IP: "10.244.2.30", Tenant: "red", NetNS: "/nonexistent"}
	for _, c := range []directory.Container{red1, red2} {
		if _, err := hs.dir.PutContainer(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	return red1
}

// offerFromElsewhere sends m to h2's broker port from an address of h1's
// loopback net that is not h1's fabric address, and describes the answer
// as sendOffer does.
func offerFromElsewhere(t *testing.T, hs twoHosts, m *protocol.Message) string {
	t.Helper()
	h2, _ := hs.h1.hostRecord("h2")
	other := hs.h1.cfg.FabricIP[:strings.LastIndex(hs.h1.cfg.FabricIP, ".")] + ".3"
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(other)}, Deadline: time.Now().Add(2 * time.Second)}
	c, err := d.Dial("tcp", net.JoinHostPort(h2.FabricIP, strconv.Itoa(hs.h2.cfg.BrokerPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return sendOfferOn(t, c.(*net.TCPConn), m)
}

// verbsOfferMsg is a VERBS_OFFER from QP qpn of the container at ip, sent
// by the agent of host, to the QP peer names, signed with key (unsigned
// if nil).
func verbsOfferMsg(t *testing.T, key []byte, host, ip string, qpn uint32, peer protocol.VerbsPeer) *protocol.Message {
	t.Helper()
	return verbsOfferOf(t, protocol.TypeVerbsOffer, key, host, ip, qpn, peer)
}

// verbsOfferOf is verbsOfferMsg for an offer of type typ.
func verbsOfferOf(t *testing.T, typ protocol.Type, key []byte, host, ip string, qpn uint32, peer protocol.VerbsPeer) *protocol.Message {
	t.Helper()
	m := protocol.New(typ, 1, protocol.U32(protocol.AttrQPN, qpn), protocol.IP(netip.MustParseAddr(ip)), peer.Attr(),
		protocol.String(protocol.AttrHost, host), newNonce(), timeAttr(time.Now()))
	if key != nil {
		if err := sign(key, m); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// A VERBS_OFFER is taken only as an OFFER is: signed under the cluster
// key, fresh, from the fabric address of the host it names, for a
// container of that host. Anything else is refused and parks nothing, and
// an accepted offer parks nothing until its COMMIT; the pair still
// connects after.
func TestVerbsOfferForgedOrMisaddressedParksNothing(t *testing.T) {
	hs := startTwoHosts(t, nil)
	l1, l2 := newLib(t, hs.h1), newLib(t, hs.h2)
	qa, _ := newQP(t, l1, 1)
	qb, _ := newQP(t, l2, 1)
	_, err := connectAcross(t, l2, qb, lidPeer(qa, selfLID)) // qb wants qa
	wantCode(t, err, protocol.CodeNotFound)
	key, to := hs.h1.clusterKey(), lidPeer(qb, self2LID)

	genuine := verbsOfferMsg(t, key, "h1", ffSelf.IP, qa, to)
	if got := sendOffer(t, hs, genuine); got != "PATH host-tcp " {
		t.Errorf("a genuine offer, never committed: %s", got)
	}
	waitFor(t, "the uncommitted acceptance ends", func() bool { return !pairing(hs.h2, qb).accepting })
	nothingParked(t, hs.h2, qb, "an accepted offer without COMMIT")

	for name, m := range map[string]*protocol.Message{
		"wrong key": verbsOfferMsg(t, make([]byte, 32), "h1", ffSelf.IP, qa, to),
		"unsigned":  verbsOfferMsg(t, nil, "h1", ffSelf.IP, qa, to),
		"replayed":  genuine,
	} {
		if got := sendOffer(t, hs, m); !strings.HasPrefix(got, "DENIED") {
			t.Errorf("%s: %s, want DENIED", name, got)
		}
		nothingParked(t, hs.h2, qb, name)
	}
	for name, ip := range map[string]string{"a container of h2 itself": ffSelf2.IP, "no container": "10.244.1.77"} {
		if got := sendOffer(t, hs, verbsOfferMsg(t, key, "h1", ip, qa, to)); got != "PATH overlay "+reasonNotContainer {
			t.Errorf("an offer from %s: %s, want overlay %s", name, got, reasonNotContainer)
		}
		nothingParked(t, hs.h2, qb, "an offer from "+name)
	}

	// h1's key and name, but not h1's fabric address.
	if got := offerFromElsewhere(t, hs, verbsOfferMsg(t, key, "h1", ffSelf.IP, qa, to)); !strings.HasPrefix(got, "DENIED") {
		t.Errorf("an offer from another address naming h1: %s, want DENIED", got)
	}
	nothingParked(t, hs.h2, qb, "an offer from another address")

	fa, err := connectAcross(t, l1, qa, lidPeer(qb, self2LID))
	if err != nil {
		t.Fatalf("the genuine pair after the refusals: %v", err)
	}
	fb, err := connectUntilConnected(t, l2, qb, lidPeer(qa, selfLID))
	if err != nil {
		t.Fatal(err)
	}
	oneConnection(t, hs, fa, fb)
}

// A QP takes a connection only from the QP its own VERBS_CONNECT named:
// another QP of the same container that offers is refused, and nothing is
// parked for it.
func TestVerbsOfferForAQPThatWantsAnotherRefused(t *testing.T) {
	hs := startTwoHosts(t, nil)
	l1, l2 := newLib(t, hs.h1), newLib(t, hs.h2)
	qa, _ := newQP(t, l1, 1)
	qc, _ := newQP(t, l1, 1)
	qb, _ := newQP(t, l2, 1)
	_, err := connectAcross(t, l2, qb, lidPeer(qa, selfLID))
	wantCode(t, err, protocol.CodeNotFound)
	_, err = connectAcross(t, l1, qc, lidPeer(qb, self2LID))
	wantCode(t, err, protocol.CodeNotFound)
	if !strings.Contains(err.Error(), reasonVerbsNotReady) {
		t.Errorf("a QP that wants another: %v; want it said (%s)", err, reasonVerbsNotReady)
	}
	nothingParked(t, hs.h2, qb, "an offer from a QP it does not want")
	nothingParked(t, hs.h1, qc, "its offer refused")
	fa, err := connectAcross(t, l1, qa, lidPeer(qb, self2LID))
	if err != nil {
		t.Fatalf("the QP it wants: %v", err)
	}
	fb, err := connectUntilConnected(t, l2, qb, lidPeer(qa, selfLID))
	if err != nil {
		t.Fatal(err)
	}
	oneConnection(t, hs, fa, fb)
}

// A parked end goes with its QP: destroyed, its session ended, or its
// agent stopped, the connection is closed and the other end reads EOF.
func TestVerbsParkedSocketClosedWhenItsQPEnds(t *testing.T) {
	hs := startTwoHosts(t, nil)
	l1 := newLib(t, hs.h1)
	for _, end := range []string{"session end", "VERBS_QP_DESTROY", "agent stop"} {
		l2, err := dialLib(hs.h2.cfg.LibrarySocket())
		if err != nil {
			t.Fatal(err)
		}
		qa, _ := newQP(t, l1, 1)
		qb, _ := newQP(t, l2, 1)
		_, err = connectAcross(t, l2, qb, lidPeer(qa, selfLID))
		wantCode(t, err, protocol.CodeNotFound)
		fa, err := connectAcross(t, l1, qa, lidPeer(qb, self2LID))
		if err != nil {
			t.Fatal(err)
		}
		if end == "agent stop" {
			hs.h2.stop()
		} else {
			endQP(t, l2, qb, end)
		}
		if err := wantEOF(fa, 5*time.Second); err != nil {
			t.Errorf("%s: the other end %v", end, err)
		}
		l2.conn.Close()
	}
}

// UD QPs do not connect across hosts: INVALID, saying they use lanes.
func TestVerbsCrossHostUDIsInvalid(t *testing.T) {
	hs := startTwoHosts(t, nil)
	l1 := newLib(t, hs.h1)
	qu, err := l1.qpCreate(newQPMemfd(t), protocol.QPTypeUD, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = connectAcross(t, l1, qu, lidPeer(1, self2LID))
	wantCode(t, err, protocol.CodeInvalid)
	if !strings.Contains(err.Error(), "VERBS_UD_LANE") {
		t.Errorf("UD across hosts: %v; want it to name lanes (VERBS_UD_LANE)", err)
	}
}

// A peer host whose agent does not answer is not there yet: NOTFOUND,
// naming that host, within the offer's budget.
func TestVerbsCrossHostPeerAgentDownNotFound(t *testing.T) {
	hs := startTwoHosts(t, nil)
	l1 := newLib(t, hs.h1)
	qa, _ := newQP(t, l1, 1)
	hs.h2.stop()
	start := time.Now()
	_, err := connectAcross(t, l1, qa, lidPeer(1, self2LID))
	wantCode(t, err, protocol.CodeNotFound)
	if !strings.Contains(err.Error(), "host h2") || time.Since(start) > offerBudget+slackMax {
		t.Errorf("peer agent down: %v after %v; want NOTFOUND naming host h2 within %v", err, time.Since(start), offerBudget)
	}
}

// A peer host whose agent takes the connection and never answers costs
// each offer its whole budget, and a provider asks every millisecond with
// its context locked: after such an offer its QP is not offered again for
// reofferAfter (asks meanwhile are NOTFOUND at once), then it is.
func TestVerbsCrossHostSilentPeerAgentNotAskedAgainAtOnce(t *testing.T) {
	hs := startTwoHosts(t, nil)
	h2, _ := hs.h1.hostRecord("h2")
	l1 := newLib(t, hs.h1)
	qa, _ := newQP(t, l1, 1)
	hs.h2.stop()
	ln, err := net.Listen("tcp", net.JoinHostPort(h2.FabricIP, strconv.Itoa(hs.h1.cfg.BrokerPort)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var offers atomic.Int32 // VERBS_OFFERs the silent agent read, on any connection
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			go func() {
				for {
					m, err := readFrame(c)
					if err != nil {
						return
					}
					if m.Type == protocol.TypeVerbsOffer {
						offers.Add(1)
					}
				}
			}()
		}
	}()
	_, err = connectAcross(t, l1, qa, lidPeer(1, self2LID))
	wantCode(t, err, protocol.CodeNotFound)
	waitFor(t, "the silent agent read the offer", func() bool { return offers.Load() == 1 })
	for range 20 {
		_, err = connectAcross(t, l1, qa, lidPeer(1, self2LID))
		wantCode(t, err, protocol.CodeNotFound)
	}
	if n := offers.Load(); n != 1 {
		t.Fatalf("%d offers to a silent agent in a row; want one per %v", n, reofferAfter)
	}
	time.Sleep(reofferAfter)
	_, err = connectAcross(t, l1, qa, lidPeer(1, self2LID))
	wantCode(t, err, protocol.CodeNotFound)
	waitFor(t, "an offer again after reofferAfter", func() bool { return offers.Load() == 2 })
}

// A process that could clear the mark of a handed fabric socket gets no
// connection: its VERBS_CONNECT across hosts is DENIED, and its agent
// refuses an offer to its QP (the test process holds CAP_NET_RAW and
// CAP_NET_ADMIN; the agents run with the guard configured, its rules not
// installed: guard_test.go tests them).
func TestVerbsCrossHostCallerMayClearMarkGetsNoSocket(t *testing.T) {
	skipWithoutMarkCaps(t)
	hs := startTwoHosts(t, func(c *Config) {
		c.FabricGuard, c.installGuard = true, func() error { return nil }
	})
	l1, l2 := newLib(t, hs.h1), newLib(t, hs.h2)
	qa, _ := newQP(t, l1, 1)
	qb, _ := newQP(t, l2, 1)
	_, err := connectAcross(t, l1, qa, lidPeer(qb, self2LID))
	wantCode(t, err, protocol.CodeDenied)
	if !strings.Contains(err.Error(), reasonMayClearMark) {
		t.Errorf("caller that may clear the mark: %v; want it said (%s)", err, reasonMayClearMark)
	}
	m := verbsOfferMsg(t, hs.h1.clusterKey(), "h1", ffSelf.IP, qa, lidPeer(qb, self2LID))
	if got := sendOffer(t, hs, m); got != "PATH overlay "+reasonMayClearMark {
		t.Errorf("an offer to a QP of a process that may clear the mark: %s", got)
	}
	nothingParked(t, hs.h2, qb, "an offer it may not take")
}

// skipWithoutMarkCaps skips a test of what a process that could clear the
// fabric mark is refused, when the test process could not.
func skipWithoutMarkCaps(t *testing.T) {
	t.Helper()
	if caps, err := capSets(int32(os.Getpid())); err != nil || caps&markCaps != markCaps {
		t.Skipf("the test process has capability sets %#x (%v), without CAP_NET_RAW and CAP_NET_ADMIN: nothing to refuse", caps, err)
	}
}

// `freeflow conns --qps` lists a QP connected across hosts with path
// host-tcp and the remote QP: registered until its connection is made,
// connected after.
func TestConnsListsCrossHostQP(t *testing.T) {
	hs := startTwoHosts(t, nil)
	l1, l2 := newLib(t, hs.h1), newLib(t, hs.h2)
	qa, _ := newQP(t, l1, 1)
	qb, _ := newQP(t, l2, 1)
	listed := func(a *testAgent, qpn uint32) string {
		for _, q := range a.qpList() {
			if q.QPN == qpn {
				return fmt.Sprintf("%s %s %#x %s", q.Path, q.PeerContainer, q.PeerQPN, q.State)
			}
		}
		return "not listed"
	}
	_, err := connectAcross(t, l2, qb, lidPeer(qa, selfLID))
	wantCode(t, err, protocol.CodeNotFound)
	if got, want := listed(hs.h2, qb), fmt.Sprintf("host-tcp self %#x registered", qa); got != want {
		t.Errorf("h2's QP before its connection: %s, want %s", got, want)
	}
	if _, err := connectAcross(t, l1, qa, lidPeer(qb, self2LID)); err != nil {
		t.Fatal(err)
	}
	if got, want := listed(hs.h1, qa), fmt.Sprintf("host-tcp self2 %#x connected", qb); got != want {
		t.Errorf("h1's QP: %s, want %s", got, want)
	}
	want := fmt.Sprintf("host-tcp self %#x connected", qa)
	waitFor(t, "h2's QP listed "+want+" once its end is parked", func() bool { return listed(hs.h2, qb) == want })
}

// A QP whose agent accepted an offer for it, and awaits its COMMIT,
// neither offers nor accepts another meanwhile: else the other QP's agent
// could accept one of its offers too, and the pair would have two
// connections. The test plays h2's agent for the accepted offer.
func TestVerbsCrossHostNoSecondOfferWhileOneAwaitsItsCommit(t *testing.T) {
	hs := startTwoHosts(t, nil)
	l1, l2 := newLib(t, hs.h1), newLib(t, hs.h2)
	qa, _ := newQP(t, l1, 1)
	qb, _ := newQP(t, l2, 1)
	_, err := connectAcross(t, l1, qa, lidPeer(qb, self2LID)) // qa wants qb; h2 refuses, qb wants nothing
	wantCode(t, err, protocol.CodeNotFound)

	h1, _ := hs.h2.hostRecord("h1")
	c, err := hs.h2.dialBroker(h1, time.Now().Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := hs.h2.clusterKey()
	offer := verbsOfferMsg(t, key, "h2", ffSelf2.IP, qb, lidPeer(qa, selfLID))
	nonce, _ := offer.Get(protocol.AttrNonce)
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if err := writeFrame(c, offer); err != nil {
		t.Fatal(err)
	}
	reply, err := readFrame(c)
	if err != nil || checkReply(key, nonce, reply) != nil {
		t.Fatalf("reply to the offer: %v, %v", reply, err)
	}
	if kind, _ := reply.Get(protocol.AttrPathKind); kind[0] != pathHostTCP {
		t.Fatalf("the offer was refused: %v", reply.Attrs)
	}

	_, err = connectAcross(t, l2, qb, lidPeer(qa, selfLID)) // qb wants qa now: h1 refuses, qa is accepting
	wantCode(t, err, protocol.CodeNotFound)
	time.Sleep(reofferAfter) // qa may offer again, as far as refusals go
	_, err = connectAcross(t, l1, qa, lidPeer(qb, self2LID))
	wantCode(t, err, protocol.CodeNotFound)
	nothingParked(t, hs.h2, qb, "QP qa asked while its acceptance awaited the COMMIT")

	if err := commit(c, key, nonce, reply.Seq); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the committed connection parked", func() bool { return pairing(hs.h1, qa).parked >= 0 })
	fa, err := connectAcross(t, l1, qa, lidPeer(qb, self2LID))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	raw.Control(func(fd uintptr) { err = exchange(fa, int(fd)) })
	if err != nil {
		t.Errorf("the handed end is not the committed connection: %v", err)
	}
}

// A socket parked for a QP counts as a file its container holds: a hostile
// program whose QPs never ask for their parked ends makes the agent hold
// no more descriptors for it than its memfds may. Past the limit an offer
// is refused (the pair still connects from the other side, or once an
// end is taken).
func TestVerbsParkedSocketsCountInTheContainersHeldFiles(t *testing.T) {
	hs := startTwoHosts(t, func(c *Config) { c.verbsFDs = 3 })
	l1, l2 := newLib(t, hs.h1), newLib(t, hs.h2)
	m1, m2 := newQPMemfd(t), newQPMemfd(t) // one held file per container
	var qa, qb [3]uint32
	for i := range 3 {
		var err error
		if qa[i], err = l1.qpCreate(m1, protocol.QPTypeRC, 1); err != nil {
			t.Fatal(err)
		}
		if qb[i], err = l2.qpCreate(m2, protocol.QPTypeRC, 1); err != nil {
			t.Fatal(err)
		}
		_, err = connectAcross(t, l2, qb[i], lidPeer(qa[i], selfLID))
		wantCode(t, err, protocol.CodeNotFound)
	}
	for i := range 2 { // the memfd and two parked sockets: h2 holds 3 files for self2
		if _, err := connectAcross(t, l1, qa[i], lidPeer(qb[i], self2LID)); err != nil {
			t.Fatalf("pair %d: %v", i, err)
		}
		waitFor(t, "the end parked", func() bool { return pairing(hs.h2, qb[i]).parked >= 0 })
	}
	_, err := connectAcross(t, l1, qa[2], lidPeer(qb[2], self2LID))
	wantCode(t, err, protocol.CodeNotFound)
	if !strings.Contains(err.Error(), reasonVerbsLimit) {
		t.Errorf("a third parked socket: %v; want it refused (%s)", err, reasonVerbsLimit)
	}
	nothingParked(t, hs.h2, qb[2], "an offer past the limit")
	if _, err := connectAcross(t, l2, qb[0], lidPeer(qa[0], selfLID)); err != nil { // taken: room again
		t.Fatal(err)
	}
	// A refused offer is not made again for reofferAfter: ask until it is.
	fa, err := connectUntilConnected(t, l1, qa[2], lidPeer(qb[2], self2LID))
	if err != nil {
		t.Fatalf("once an end was taken: %v", err)
	}
	fb, err := connectUntilConnected(t, l2, qb[2], lidPeer(qa[2], selfLID))
	if err != nil {
		t.Fatal(err)
	}
	oneConnection(t, hs, fa, fb)
}
