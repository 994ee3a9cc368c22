package agent

import (
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Two single-threaded processes, each listening, connect to each other at
// the same moment (Open MPI's TCP transport does this): each blocks in its
// CONNECT and cannot ACCEPT before that is answered. The agent decides the
// fast path without the acceptor and parks its half until its ACCEPT. In
// process, "A" and "B" are two sessions of the test process.

// crossConnect sends A's CONNECT, and a moment later B's, and returns
// both answers.
func crossConnect(t *testing.T, procA, procB *libClient, aLocal, aRemote, bLocal, bRemote string) (fromA, fromB pathResult) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		var err error
		fromA, err = procA.connect(aLocal, aRemote)
		done <- err
	}()
	time.Sleep(5 * time.Millisecond) // A's CONNECT usually waits first: both rules fire
	fromB, err := procB.connect(bLocal, bRemote)
	if aerr := <-done; err != nil || aerr != nil {
		t.Fatalf("A's connect: %v; B's connect: %v", aerr, err)
	}
	t.Cleanup(func() { closeResult(fromA); closeResult(fromB) }) // each descriptor once: callers close none
	return fromA, fromB
}

// wantPrompt checks r is the fast path kind, answered well before the
// rendezvous bound that a timeout would take.
func wantPrompt(t *testing.T, what string, r pathResult, kind uint8) {
	t.Helper()
	if r.Kind != kind || r.FD < 0 || r.Elapsed >= meetWait {
		t.Errorf("%s: %+v, want %s with a descriptor within %v", what, r, pathName(kind), meetWait)
	}
}

func TestSimultaneousConnectsBothFast(t *testing.T) {
	a := startAgent(t, newFakeDir(ffSelf), nil)
	procA, procB := newLib(t, a), newLib(t, a)
	lisA, lisB, aCli, bCli := selfIP+":7001", selfIP+":7002", selfCli(44001), selfCli(44002)
	if err := procA.listen(lisA); err != nil {
		t.Fatal(err)
	}
	if err := procB.listen(lisB); err != nil {
		t.Fatal(err)
	}
	ca, cb := crossConnect(t, procA, procB, aCli, lisB, bCli, lisA)
	wantPrompt(t, "A's connect", ca, pathUnix)
	wantPrompt(t, "B's connect", cb, pathUnix)

	// Nobody but the acceptor side of the tuple gets a parked half: not a
	// repeated CONNECT, not an ACCEPT of another connection to the listener.
	if r, err := procB.connect(bCli, lisA); err != nil || r.Kind != pathOverlay || r.FD >= 0 {
		t.Errorf("a repeated CONNECT of a parked tuple: %+v, %v; want overlay without a descriptor", r, err)
	}
	if r, err := procA.accept(lisA, selfCli(44003)); err != nil || r.Reason != reasonTimeout {
		t.Errorf("ACCEPT of another connection: %+v, %v; want overlay %s", r, err, reasonTimeout)
	}

	// The ACCEPTs that come later claim the halves, joined to the right peers.
	aa, err := procA.accept(lisA, bCli)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFD(aa.FD)
	ba, err := procB.accept(lisB, aCli)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFD(ba.FD)
	wantPrompt(t, "A's accept", aa, pathUnix)
	wantPrompt(t, "B's accept", ba, pathUnix)
	if err := exchange(cb.FD, aa.FD); err != nil {
		t.Errorf("B's connect and A's accept are not one channel: %v", err)
	}
	if err := exchange(ca.FD, ba.FD); err != nil {
		t.Errorf("A's connect and B's accept are not one channel: %v", err)
	}
	// Both ends took their halves: the same tuple asked again is a new
	// connection reusing the port, met afresh (nobody connects: timeout).
	if r, err := procA.accept(lisA, bCli); err != nil || r.Reason != reasonTimeout || r.FD >= 0 {
		t.Errorf("a second ACCEPT of a claimed half: %+v, %v; want overlay %s", r, err, reasonTimeout)
	}
}

// A parked half that no ACCEPT claims is closed after keepDecided: the
// connector reads EOF; a later ACCEPT gets no half.
func TestParkedHalfClosedAfterKeep(t *testing.T) {
	const keep = 300 * time.Millisecond
	a := startAgent(t, newFakeDir(ffSelf), func(c *Config) { c.keepDecided = keep })
	procA, procB := newLib(t, a), newLib(t, a)
	lisA, lisB, aCli, bCli := selfIP+":7001", selfIP+":7002", selfCli(44011), selfCli(44012)
	procA.listen(lisA)
	procB.listen(lisB)
	ca, cb := crossConnect(t, procA, procB, aCli, lisB, bCli, lisA)
	wantPrompt(t, "A's connect", ca, pathUnix)
	wantPrompt(t, "B's connect", cb, pathUnix)
	start := time.Now()
	for name, fd := range map[string]int{"A's connect": ca.FD, "B's connect": cb.FD} {
		if err := wantEOF(fd, keep+time.Second); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if waited := time.Since(start); waited < keep-50*time.Millisecond {
		t.Errorf("the parked halves were closed after %v, before keepDecided (%v)", waited, keep)
	}
	if r, err := procA.accept(lisA, bCli); err != nil || r.Kind != pathOverlay || r.FD >= 0 {
		t.Errorf("ACCEPT after the half was closed: %+v, %v; want overlay without a descriptor", r, err)
	}
}

// wantEOF waits up to limit for fd to read end-of-file.
func wantEOF(fd int, limit time.Duration) error {
	syscall.SetNonblock(fd, false)
	tv := syscall.NsecToTimeval(limit.Nanoseconds())
	syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	n, err := syscall.Read(fd, make([]byte, 16))
	for err == syscall.EINTR { // the Go runtime's preemption signal, not the peer
		n, err = syscall.Read(fd, make([]byte, 16))
	}
	if n != 0 || err != nil {
		return fmt.Errorf("read %d bytes, %v; want EOF within %v", n, err, limit)
	}
	return nil
}

// Only the acceptor's container can claim a parked half: a process in
// another container naming the tuple is DENIED, and its own tuple is
// another connection.
func TestParkedHalfOnlyForItsAcceptor(t *testing.T) {
	ns := makeNetns(t)
	other := container("co", "other", "10.244.1.40", ns)
	other.FreeFlow = true
	a := startAgent(t, newFakeDir(ffSelf, other), nil)
	procA, procB := newLib(t, a), newLib(t, a)
	lisA, lisB, aCli, bCli := selfIP+":7001", selfIP+":7002", selfCli(44021), selfCli(44022)
	procA.listen(lisA)
	procB.listen(lisB)
	_, cb := crossConnect(t, procA, procB, aCli, lisB, bCli, lisA)
	wantPrompt(t, "B's connect", cb, pathUnix)
	for local, want := range map[string]string{lisA: "DENIED", other.IP + ":7001": reasonTimeout} {
		thief := startAsker(t, ns, askSpec{Sock: a.cfg.LibrarySocket(), Ask: "accept", Local: local, Remote: bCli})
		thief.goAhead()
		r := thief.result(t)
		if got := r.Reason + r.Err; r.Data != "" || !strings.Contains(got, want) {
			t.Errorf("ACCEPT %s <- %s from container other: %+v; want %s", local, bCli, r, want)
		}
	}
	aa, err := procA.accept(lisA, bCli)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFD(aa.FD)
	wantPrompt(t, "A's accept", aa, pathUnix)
	if err := exchange(cb.FD, aa.FD); err != nil {
		t.Errorf("B's connect and A's accept are not one channel: %v", err)
	}
}

// Across hosts: A on h1 and B on h2, single-threaded processes, each
// connect to the other and then accept. The acceptor's agent of the first
// CONNECT parks the offered TCP connection for its local ACCEPT; the
// second is parked too or met by the first process's prompt ACCEPT.
// Either way all four answers are fast and prompt.
func TestSimultaneousConnectsBothFastCrossHost(t *testing.T) {
	const keep = 500 * time.Millisecond
	hs := startTwoHosts(t, func(c *Config) { c.keepDecided = keep })
	procA, procB := newLib(t, hs.h1), newLib(t, hs.h2)
	lisA, lisB := selfIP+":7001", ffSelf2.IP+":7002"
	if err := procA.listen(lisA); err != nil {
		t.Fatal(err)
	}
	if err := procB.listen(lisB); err != nil {
		t.Fatal(err)
	}
	aCli, bCli := selfCli(44031), ffSelf2.IP+":44032"
	type process struct {
		con, acc pathResult
		err      error
	}
	run := func(p *process, l *libClient, local, remote, lis, peer string) {
		if p.con, p.err = l.connect(local, remote); p.err == nil {
			p.acc, p.err = l.accept(lis, peer)
		}
	}
	var pa, pb process
	done := make(chan struct{})
	go func() { run(&pa, procA, aCli, lisB, lisA, bCli); close(done) }()
	time.Sleep(5 * time.Millisecond)
	run(&pb, procB, bCli, lisA, lisB, aCli)
	<-done
	if pa.err != nil || pb.err != nil {
		t.Fatalf("process A: %v; process B: %v", pa.err, pb.err)
	}
	for _, r := range []pathResult{pa.con, pa.acc, pb.con, pb.acc} {
		defer closeFD(r.FD)
	}
	wantPrompt(t, "A's connect", pa.con, pathHostTCP)
	wantPrompt(t, "B's connect", pb.con, pathHostTCP)
	wantPrompt(t, "A's accept", pa.acc, pathHostTCP)
	wantPrompt(t, "B's accept", pb.acc, pathHostTCP)
	if err := exchange(pb.con.FD, pa.acc.FD); err != nil {
		t.Errorf("B's connect and A's accept are not one connection: %v", err)
	}
	if err := exchange(pa.con.FD, pb.acc.FD); err != nil {
		t.Errorf("A's connect and B's accept are not one connection: %v", err)
	}

	// Unclaimed: A's connection, parked on h2 while B waits in its own
	// CONNECT, reads EOF once keepDecided has passed.
	ca, _ := crossConnect(t, procA, procB, selfCli(44033), lisB, ffSelf2.IP+":44034", lisA)
	wantPrompt(t, "A's second connect", ca, pathHostTCP)
	if err := wantEOF(ca.FD, keep+time.Second); err != nil {
		t.Errorf("A's second connect: %v", err)
	}
}

// An acceptor busy with another connection: a single-threaded server
// waits in the ACCEPT of one connection (Y) whose connector asks only
// after its CONNECT of another connection to the same server (X) is
// answered, as a client's library thread deciding its late connects one
// at a time does (lib/src/setup/settler.c). The server cannot ACCEPT X before Y
// is answered, nor the client CONNECT Y before X is: the agent decides X
// at once and parks the server's half, so nothing waits out the bound.
func TestAcceptorBusyInAnotherAcceptParksConnector(t *testing.T) {
	a := startAgent(t, newFakeDir(ffSelf), nil)
	srv, cli := newLib(t, a), newLib(t, a)
	lis, x, y := selfIP+":7001", selfCli(44031), selfCli(44032)
	if err := srv.listen(lis); err != nil {
		t.Fatal(err)
	}
	type result struct {
		r   pathResult
		err error
	}
	acceptY := make(chan result, 1)
	go func() {
		r, err := srv.accept(lis, y)
		acceptY <- result{r, err}
	}()
	time.Sleep(5 * time.Millisecond) // the server's ACCEPT of Y waits first
	cx, err := cli.connect(x, lis)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFD(cx.FD)
	wantPrompt(t, "the CONNECT of X while the server waits in the ACCEPT of Y", cx, pathUnix)
	cy, err := cli.connect(y, lis)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFD(cy.FD)
	ay := <-acceptY
	if ay.err != nil {
		t.Fatal(ay.err)
	}
	defer closeFD(ay.r.FD)
	ax, err := srv.accept(lis, x)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFD(ax.FD)
	wantPrompt(t, "the CONNECT of Y", cy, pathUnix)
	wantPrompt(t, "the ACCEPT of X, its half parked", ax, pathUnix)
	if ay.r.Kind != pathUnix || ay.r.FD < 0 {
		t.Errorf("the ACCEPT of Y: %+v, want %s", ay.r, pathName(pathUnix))
	}
	for name, fds := range map[string][2]int{"X": {cx.FD, ax.FD}, "Y": {cy.FD, ay.r.FD}} {
		if err := exchange(fds[0], fds[1]); err != nil {
			t.Errorf("%s's two ends are not one channel: %v", name, err)
		}
	}
}

// Which connectors an acceptor waiting in an ACCEPT parks (distinct
// processes, at the rendezvous itself): not those of a backlog when its
// ACCEPT waits for nothing (its CONNECT is there), nor another client's,
// but the same client's while its ACCEPT waits for that client's CONNECT.
func TestAcceptorWaitingParksOnlyItsClient(t *testing.T) {
	r := newRendezvous(time.Second)
	lis := listenerKey{"srv", 80}
	srvEP := netip.MustParseAddrPort("10.244.1.3:80")
	srv := &connector{pid: 7, mine: map[listenerKey]bool{lis: true}}
	tup := func(cli string) tuple { return tuple{conn: netip.MustParseAddrPort(cli), acc: srvEP} }
	connect := func(k tuple, pid int32) *meeting {
		m, _ := r.join(k, sideConnector, &listenerInfo{key: lis, pids: []int32{srv.pid}, conn: "cli"},
			&connector{pid: pid}, asking{})
		return m
	}
	backlog := connect(tup("10.244.1.5:1001"), 50)
	connect(tup("10.244.1.5:1002"), 51)
	if _, role := r.join(tup("10.244.1.5:1002"), sideAcceptor, nil, srv, asking{}); role != roleSecond {
		t.Fatalf("ACCEPT of a waiting CONNECT: role %v", role)
	}
	r.endAsk(srv, sideAcceptor, tup("10.244.1.5:1002"))
	if backlog.park {
		t.Error("an ACCEPT that waited for nothing parked a connector of the backlog")
	}
	r.join(tup("10.244.1.6:2001"), sideAcceptor, nil, srv, asking{}) // waits for another client
	if backlog.park {
		t.Error("an ACCEPT waiting for another client's CONNECT parked this client's")
	}
	r.join(tup("10.244.1.5:1003"), sideAcceptor, nil, srv, asking{}) // waits for this client
	if !backlog.park {
		t.Error("an ACCEPT waiting for this client's CONNECT did not park its waiting connector")
	}
	if late := connect(tup("10.244.1.5:1004"), 52); !late.park {
		t.Error("a CONNECT of the client whose CONNECT the acceptor waits for was not parked")
	}
	if other := connect(tup("10.244.1.7:3001"), 53); other.park {
		t.Error("another client's CONNECT was parked")
	}
}
