package agent

import (
	"net"
	"net/netip"
	"os/exec"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/netns"
)

const slowIP = "10.244.1.2"

// slowAcceptor is container ca in a namespace of its own, whose loopback
// carries its IP, with a real listener there that nobody accepts on
// until the test does, and a connection to it from the same namespace,
// handshake done, still in the listener's accept queue.
type slowAcceptor struct {
	a  *testAgent // the acceptor's
	ns string
	ln net.Listener
	k  tuple
}

func newSlowAcceptor(t *testing.T) *slowAcceptor {
	t.Helper()
	return slowAcceptorOn(t, startAgent(t, newFakeDir(), nil), slowIP, slowIP)
}

// slowAcceptorOn is newSlowAcceptor for container ca with IP accIP on
// a's host, whose queued connection comes from cliIP (also on its
// loopback: the connector's address, wherever the connector is).
func slowAcceptorOn(t *testing.T, a *testAgent, accIP, cliIP string) *slowAcceptor {
	t.Helper()
	ns := makeNetns(t)
	for _, args := range [][]string{{"link", "set", "lo", "up"}, {"addr", "add", accIP + "/32", "dev", "lo"},
		{"addr", "replace", cliIP + "/32", "dev", "lo"}} {
		if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip -n %s %v: %v: %s", ns, args, err, out)
		}
	}
	c := container("ca", "web", accIP, ns)
	c.Host, c.FreeFlow = a.cfg.Host, true
	a.dir.putContainer(c) // as CNI's REGISTER would, which a cross-host test (the test process is container self2 to h2) may not send
	a.refreshIdentities()
	ln, err := netns.Listen(netns.Path(ns), "tcp", accIP+":7100")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var client net.Conn
	err = netns.Do(netns.Path(ns), func() error {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(cliIP)}}
		client, err = d.DialContext(ctxT(t), "tcp", accIP+":7100")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return &slowAcceptor{a: a, ns: ns, ln: ln,
		k: tuple{conn: client.LocalAddr().(*net.TCPAddr).AddrPort(), acc: netip.MustParseAddrPort(accIP + ":7100")}}
}

// acceptor starts the acceptor's library (it registers the listener),
// waiting for go.
func (s *slowAcceptor) acceptor(t *testing.T) *asker {
	t.Helper()
	return startAsker(t, s.ns, askSpec{Sock: s.a.cfg.LibrarySocket(), Listen: "0.0.0.0:7100", Ask: "accept",
		Local: s.k.acc.String(), Remote: s.k.conn.String()})
}

// askers starts the acceptor's library and the connector's, in the
// same container, both waiting for go.
func (s *slowAcceptor) askers(t *testing.T) (con, acc *asker) {
	t.Helper()
	acc = s.acceptor(t)
	con = startAsker(t, s.ns, askSpec{Sock: s.a.cfg.LibrarySocket(), Ask: "connect", Local: s.k.conn.String(), Remote: s.k.acc.String()})
	return con, acc
}

// accept takes the connection from the accept queue.
func (s *slowAcceptor) accept(t *testing.T) {
	t.Helper()
	c, err := s.ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
}

// TestSlowAcceptorGetsFastPath: a server that calls accept() 100 ms
// after the handshake (a busy event loop, a sleep between accepts), later
// than the 45 ms the agent waits for an ACCEPT: its connection is still
// in the accept queue, so the connector waits on, and both ends get the
// fast path instead of the overlay (peer-timeout).
func TestSlowAcceptorGetsFastPath(t *testing.T) {
	s := newSlowAcceptor(t)
	con, acc := s.askers(t)
	con.goAhead()
	time.Sleep(100 * time.Millisecond) // the server's delay: the case under test, not a wait for an event
	s.accept(t)
	acc.goAhead()
	cr, ar := con.result(t), acc.result(t)
	if cr.Path != "unix" || ar.Path != "unix" || cr.Data != "ok" || ar.Data != "ok" {
		t.Fatalf("connector %+v, acceptor %+v; want both on the fast path (unix) with the bytes through", cr, ar)
	}
}

// TestSlowAcceptorAcceptedWithoutAskGetsOverlay: a connection accepted
// by a process that sends no ACCEPT (no library) is not waited for past
// meetWait and up to acceptedLooks checks: the connector gets the overlay well
// before the bound for queued connections.
func TestSlowAcceptorAcceptedWithoutAskGetsOverlay(t *testing.T) {
	s := newSlowAcceptor(t)
	con, _ := s.askers(t)
	s.accept(t)
	con.goAhead()
	cr := con.result(t)
	if cr.Path != "overlay" || cr.Reason != reasonTimeout {
		t.Fatalf("connector %+v; want the overlay, %s", cr, reasonTimeout)
	}
	if cr.Elapsed >= queuedWait {
		t.Errorf("connector answered after %v; want the overlay at about %v + %v, before %v", cr.Elapsed, meetWait, queuedCheck, queuedWait)
	}
}

// TestSlowAcceptorWaitsBoundedPerContainer: a container whose connectors
// already wait for slow acceptors queuedPerContainer times over (each
// reads the kernel every 10 ms) gets no more such waits: its next
// connector is answered at meetWait, as before (peer-timeout).
func TestSlowAcceptorWaitsBoundedPerContainer(t *testing.T) {
	s := newSlowAcceptor(t)
	for range queuedPerContainer {
		s.a.queued.take("ca")
	}
	con, acc := s.askers(t)
	con.goAhead()
	time.Sleep(100 * time.Millisecond) // the server's delay, as in TestSlowAcceptorGetsFastPath
	s.accept(t)
	acc.goAhead()
	cr, ar := con.result(t), acc.result(t)
	if cr.Path != "overlay" || cr.Reason != reasonTimeout || ar.Path != "overlay" || cr.Elapsed >= queuedWait {
		t.Fatalf("connector %+v, acceptor %+v; want both on the overlay, %s, at about %v", cr, ar, reasonTimeout, meetWait)
	}
}

// TestSlowAcceptorGetsFastPathCrossHost: across hosts the acceptor's
// agent, whose wait for the ACCEPT of an offer is 40 ms, waits on too
// while the connection is queued: a server accepting 80 ms after the
// handshake still gets host-tcp at both ends, within the connector
// agent's budget.
func TestSlowAcceptorGetsFastPathCrossHost(t *testing.T) {
	hs := startTwoHosts(t, nil)
	s := slowAcceptorOn(t, hs.h2, "10.244.2.2", ffSelf.IP)
	acc := s.acceptor(t)
	cli := newLib(t, hs.h1)
	done := make(chan pathResult, 1)
	go func() {
		r, err := cli.connect(s.k.conn.String(), s.k.acc.String())
		if err != nil {
			r.Reason = err.Error()
		}
		done <- r
	}()
	time.Sleep(80 * time.Millisecond) // the server's delay: the case under test, not a wait for an event
	s.accept(t)
	acc.goAhead()
	cr := <-done
	defer closeFD(cr.FD)
	data := "no channel"
	if cr.FD >= 0 {
		data = pingPong(cr.FD, true)
	}
	ar := acc.result(t)
	if cr.Kind != pathHostTCP || ar.Path != "host-tcp" || data != "ok" || ar.Data != "ok" {
		t.Fatalf("connector %+v (round trip: %s), acceptor %+v; want both on host-tcp with the bytes through", cr, data, ar)
	}
}

// TestSlowAcceptorQueueReadInContainerNamespace: the agent reads the
// acceptor's end of a connection in its container's namespace: queued,
// then accepted, then (closed) unknown; a container it does not know is
// unknown; its socket there is closed when the container is unregistered.
func TestSlowAcceptorQueueReadInContainerNamespace(t *testing.T) {
	s := newSlowAcceptor(t)
	if got := s.a.acceptState("ca", s.k); got != acceptQueued {
		t.Fatalf("before accept(): %v, want queued (%v)", got, acceptQueued)
	}
	if got := s.a.acceptState("nope", s.k); got != acceptUnknown {
		t.Errorf("an unknown container: %v, want unknown (%v)", got, acceptUnknown)
	}
	c, err := s.ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if got := s.a.acceptState("ca", s.k); got != acceptAccepted {
		t.Errorf("after accept(): %v, want accepted (%v)", got, acceptAccepted)
	}
	c.Close()
	if got := s.a.acceptState("ca", s.k); got != acceptUnknown {
		t.Errorf("after close: %v, want unknown (%v)", got, acceptUnknown)
	}
	other := s.k
	other.conn = netip.AddrPortFrom(other.conn.Addr(), other.conn.Port()+1)
	if got := s.a.acceptState("ca", other); got != acceptUnknown {
		t.Errorf("a tuple with no socket: %v, want unknown (%v)", got, acceptUnknown)
	}
	if err := adminClient(t, s.a).Unregister(ctxT(t), "ca"); err != nil {
		t.Fatal(err)
	}
	s.a.diag.mu.Lock()
	defer s.a.diag.mu.Unlock()
	if len(s.a.diag.socks) != 0 {
		t.Errorf("after the container was unregistered the agent still holds %d diag sockets", len(s.a.diag.socks))
	}
}
