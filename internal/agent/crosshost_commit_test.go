package agent

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/protocol"
)

// The COMMIT step of a cross-host offer: the acceptor's agent hands its
// end of the offer connection to the accepting library only after the
// connector's agent has committed to the fast path; the connector's agent
// commits only within its budget. Here the test plays one of the two
// agents by hand on the real broker port of the other.

// byHand is an OFFER the test sent to h2's agent as if it were h1's agent,
// and h2's host-tcp answer to it.
type byHand struct {
	c     *net.TCPConn
	key   []byte
	nonce []byte
	seq   uint32
	reply *protocol.Message // h2's answer, its MAC checked and removed
}

// offerByHand registers srv2's listener, asks ACCEPT for cport -> srv2 as
// the accepting library on h2 while offering that tuple to h2's agent,
// reads the host-tcp reply, lets then act on the connection as the
// connector's agent, and returns the accepting library's answer.
func offerByHand(t *testing.T, hs twoHosts, cport int, then func(h byHand)) pathResult {
	t.Helper()
	srv := newLib(t, hs.h2)
	if err := srv.listen(srv2); err != nil {
		t.Fatal(err)
	}
	var acc pathResult
	done := make(chan error, 1)
	go func() {
		var err error
		acc, err = srv.accept(srv2, selfCli(cport))
		done <- err
	}()
	h := sendOfferByHand(t, hs, cport)
	then(h)
	if err := <-done; err != nil {
		t.Fatalf("accept: %v", err)
	}
	t.Cleanup(func() { closeFD(acc.FD) })
	return acc
}

// sendOfferByHand sends a genuine OFFER for cport -> srv2, with the
// attributes extra before its MAC, from h1's fabric address and checks
// that h2's agent answers host-tcp.
func sendOfferByHand(t *testing.T, hs twoHosts, cport int, extra ...protocol.Attr) byHand {
	t.Helper()
	h2, _ := hs.h1.hostRecord("h2")
	c, err := hs.h1.dialBroker(h2, time.Now().Add(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(3 * time.Second))
	h := byHand{c: c, key: hs.h1.clusterKey(), seq: 7}
	nonce := newNonce()
	h.nonce = nonce.Value
	offer := protocol.New(protocol.TypeOffer, h.seq,
		protocol.Endpoint(protocol.AttrLocalEndpoint, netip.MustParseAddrPort(selfCli(cport))),
		protocol.Endpoint(protocol.AttrRemoteEndpoint, netip.MustParseAddrPort(srv2)),
		protocol.String(protocol.AttrHost, "h1"), nonce, timeAttr(time.Now()))
	offer.Attrs = append(offer.Attrs, extra...)
	if err := sign(h.key, offer); err != nil {
		t.Fatal(err)
	}
	if err := writeFrame(c, offer); err != nil {
		t.Fatal(err)
	}
	r, err := readFrame(c)
	if err != nil {
		t.Fatalf("no reply to the offer: %v", err)
	}
	if err := checkReply(h.key, h.nonce, r); err != nil {
		t.Fatal(err)
	}
	if kind, _ := r.Get(protocol.AttrPathKind); kind[0] != pathHostTCP {
		reason, _ := r.String(protocol.AttrReason)
		t.Fatalf("h2 answered %s (%s), want host-tcp", pathName(kind[0]), reason)
	}
	h.reply = r
	return h
}

func (h byHand) send(t *testing.T, m *protocol.Message) {
	t.Helper()
	if err := writeFrame(h.c, m); err != nil {
		t.Fatalf("send %v: %v", m.Type, err)
	}
}

func (h byHand) commit(t *testing.T, key, nonce []byte) {
	t.Helper()
	m, err := commitMessage(key, nonce, h.seq)
	if err != nil {
		t.Fatal(err)
	}
	h.send(t, m)
}

// wantNoCommitOverlay checks the accepting library got overlay without a
// descriptor, and that h2's agent closed the offer connection.
func wantNoCommitOverlay(t *testing.T, what string, acc pathResult, h byHand) {
	t.Helper()
	if acc.Kind != pathOverlay || acc.Reason != reasonNoCommit || acc.FD >= 0 {
		t.Errorf("%s: the accepting library got %+v; want overlay %s without a descriptor", what, acc, reasonNoCommit)
	}
	h.c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := h.c.Read(make([]byte, 1)); n != 0 || !isClosed(err) {
		t.Errorf("%s: the offer connection reads %d bytes, %v; want it closed by h2's agent", what, n, err)
	}
}

func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || (err != nil && !isTimeout(err))
}

// A valid COMMIT hands the offer connection to the accepting library, and
// bytes sent after the COMMIT are the application's, not the agent's.
func TestCommitHandsConnection(t *testing.T) {
	hs := startTwoHosts(t, nil)
	payload := []byte("first bytes of the application")
	acc := offerByHand(t, hs, 45000, func(h byHand) {
		h.commit(t, h.key, h.nonce)
		if _, err := h.c.Write(payload); err != nil {
			t.Fatal(err)
		}
	})
	if acc.Kind != pathHostTCP || acc.FD < 0 {
		t.Fatalf("accepting library got %+v, want host-tcp with a descriptor", acc)
	}
	if got, err := readFull(acc.FD, len(payload)); err != nil || !bytes.Equal(got, payload) {
		t.Errorf("the accepting library read %q, %v; want %q", got, err, payload)
	}
}

// The connector's agent dies right after reading the fast PATH: the
// accepting side gets overlay and no socket.
func TestCommitMissing(t *testing.T) {
	hs := startTwoHosts(t, nil)
	var h byHand
	acc := offerByHand(t, hs, 45010, func(got byHand) {
		h = got
		h.c.CloseWrite() // dead: EOF where the COMMIT should be
	})
	wantNoCommitOverlay(t, "COMMIT missing", acc, h)
	if got := hs.h2.live.list(); len(got) != 1 || got[0].Path != "overlay" || got[0].Reason != reasonNoCommit {
		t.Errorf("h2's conns: %+v; want the connection listed as overlay %s", got, reasonNoCommit)
	}
}

// A COMMIT that comes after the bound is too late: overlay, closed.
func TestCommitLate(t *testing.T) {
	const wait = 200 * time.Millisecond
	hs := startTwoHosts(t, func(c *Config) { c.commitWait = wait })
	var h byHand
	acc := offerByHand(t, hs, 45020, func(got byHand) {
		h = got
		time.Sleep(wait + 150*time.Millisecond)
		// It may land in a closed socket, or be refused by one (EPIPE: the
		// agent's fabric sockets end with a reset once their FIN is
		// acknowledged, fabricend.go): that is the point.
		m, err := commitMessage(h.key, h.nonce, h.seq)
		if err != nil {
			t.Fatal(err)
		}
		writeFrame(h.c, m)
	})
	wantNoCommitOverlay(t, "late COMMIT", acc, h)
	if acc.Elapsed < wait {
		t.Errorf("the accepting library was answered after %v, before the COMMIT bound %v", acc.Elapsed, wait)
	}
}

// A COMMIT that is forged (wrong key), names another offer (wrong nonce),
// or is not a COMMIT at all is refused: overlay, closed.
func TestCommitForgedRefused(t *testing.T) {
	hs := startTwoHosts(t, nil)
	cases := map[string]func(t *testing.T, h byHand){
		"wrong key":   func(t *testing.T, h byHand) { h.commit(t, make([]byte, 32), h.nonce) },
		"wrong nonce": func(t *testing.T, h byHand) { h.commit(t, h.key, newNonce().Value) },
		"unsigned": func(t *testing.T, h byHand) {
			h.send(t, protocol.New(protocol.TypeCommit, h.seq, protocol.Attr{Type: protocol.AttrNonce, Value: h.nonce}))
		},
		"an OFFER": func(t *testing.T, h byHand) {
			m := protocol.New(protocol.TypeOffer, h.seq, protocol.Attr{Type: protocol.AttrNonce, Value: h.nonce})
			sign(h.key, m)
			h.send(t, m)
		},
		"garbage": func(t *testing.T, h byHand) { h.c.Write([]byte("GET / HTTP/1.0\r\n\r\n")) },
	}
	port := 45030
	for name, act := range cases {
		port++
		var h byHand
		acc := offerByHand(t, hs, port, func(got byHand) { h = got; act(t, h) })
		wantNoCommitOverlay(t, name, acc, h)
	}
}

// The connector's side: within its budget it commits to a fast PATH;
// past its budget it writes nothing, closes, and answers overlay. h2's
// agent is replaced by a fake on its broker address that answers host-tcp
// after a delay and reports what it then reads.
func TestConnectorCommitsOnlyWithinBudget(t *testing.T) {
	hs := startTwoHosts(t, nil)
	h2, _ := hs.h1.hostRecord("h2")
	hs.h2.stop()
	ln, err := net.Listen("tcp", net.JoinHostPort(h2.FabricIP, strconv.Itoa(hs.h1.cfg.BrokerPort)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	fake := startFakeAcceptor(ln, hs.h1.clusterKey())
	port := 45100
	// offer has the fake answer after delay and returns what the connector
	// got and what the fake read after its answer.
	offer := func(delay time.Duration) (pathResult, string) {
		port++
		fake.delay <- delay
		r, err := newLib(t, hs.h1).connect(selfCli(port), srv2)
		if err != nil {
			t.Fatal(err)
		}
		closeFD(r.FD)
		return r, <-fake.seen
	}
	// An answer at once is committed. On a busy machine the exchange itself
	// may outlast the budget; that attempt must then end as past it does.
	committed := false
	for try := 0; try < 3 && !committed; try++ {
		r, got := offer(0)
		switch {
		case r.Kind == pathHostTCP && got == "COMMIT" && r.FD >= 0:
			committed = true
		case r.Kind == pathOverlay && got != "COMMIT" && r.Elapsed >= offerBudget:
			t.Logf("attempt %d outlasted the budget (%v): overlay, no COMMIT", try, r.Elapsed)
		default:
			t.Fatalf("reply at once: connector got %+v, the acceptor's agent read %s; want host-tcp with a descriptor and COMMIT", r, got)
		}
	}
	if !committed {
		t.Fatal("3 exchanges in a row outlasted the budget: no reply at once was committed")
	}
	if r, got := offer(offerBudget + 100*time.Millisecond); r.Kind != pathOverlay || got == "COMMIT" {
		t.Errorf("reply past the budget: connector got %+v, the acceptor's agent read %s; want overlay, no COMMIT", r, got)
	}
}

// fakeAcceptor stands in for h2's agent on its broker address: it takes
// every connection h1's agent makes, fresh or pooled (a pooled one starts
// with its HELLO), answers each OFFER host-tcp after the delay asked for
// now, and says on seen what it read next: "COMMIT" for a valid one,
// else what went wrong.
type fakeAcceptor struct {
	key   []byte
	delay chan time.Duration // the next offer's delay
	seen  chan string
}

func startFakeAcceptor(ln net.Listener, key []byte) *fakeAcceptor {
	f := &fakeAcceptor{key: key, delay: make(chan time.Duration, 1), seen: make(chan string, 1)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go f.serve(c)
		}
	}()
	return f
}

func (f *fakeAcceptor) serve(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	offer, err := readFrame(c)
	if err == nil && offer.Type == protocol.TypeHello {
		offer, err = readFrame(c) // a pooled connection: its offer comes later
	}
	if err != nil || offer.Type != protocol.TypeOffer || verify(f.key, offer) != nil {
		return
	}
	delay := <-f.delay
	nonce, _ := offer.Get(protocol.AttrNonce)
	time.Sleep(delay)
	r := protocol.New(protocol.TypePath, offer.Seq, protocol.U8(protocol.AttrPathKind, pathHostTCP),
		protocol.Attr{Type: protocol.AttrNonce, Value: nonce})
	sign(f.key, r)
	writeFrame(c, r)
	m, err := readFrame(c)
	switch {
	case err != nil:
		f.seen <- "no COMMIT: " + err.Error()
	case checkCommit(f.key, nonce, m) != nil:
		f.seen <- "a bad COMMIT"
	default:
		f.seen <- "COMMIT"
	}
}
