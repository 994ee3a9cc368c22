package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/protocol"
	"golang.org/x/sys/unix"
)

// capsLink is what a library that takes shm channels and links says.
const capsLink = protocol.CapShm | protocol.CapLink

// wantLinkPair checks that con and acc each came with a link, LINK_TTL
// 2000, and that the two are the ends of one AF_UNIX SOCK_SEQPACKET pair
// that keeps datagram boundaries.
func wantLinkPair(t *testing.T, con, acc pathResult) {
	t.Helper()
	if con.Link < 0 || acc.Link < 0 || con.LinkTTL != 2000 || acc.LinkTTL != 2000 {
		t.Fatalf("connector %+v, acceptor %+v; want a link with LINK_TTL 2000 for both", con, acc)
	}
	for _, fd := range []int{con.Link, acc.Link} {
		typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
		if socketDomain(fd) != unix.AF_UNIX || err != nil || typ != unix.SOCK_SEQPACKET {
			t.Fatalf("link fd %d: domain %d, type %d (%v); want AF_UNIX SOCK_SEQPACKET", fd, socketDomain(fd), typ, err)
		}
	}
	for _, dir := range [][2]int{{con.Link, acc.Link}, {acc.Link, con.Link}} {
		for _, msg := range []string{"offer", "taken!"} { // two datagrams, read one at a time
			if _, err := unix.Write(dir[0], []byte(msg)); err != nil {
				t.Fatalf("write on the link: %v", err)
			}
		}
		for _, want := range []string{"offer", "taken!"} {
			if got, err := readDatagram(dir[1]); err != nil || got != want {
				t.Fatalf("read on the other end of the link: %q, %v; want the datagram %q", got, err, want)
			}
		}
	}
}

// readDatagram reads one datagram from fd within 5 seconds.
func readDatagram(fd int) (string, error) {
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
	buf := make([]byte, 64)
	n, err := unix.Read(fd, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// wantNoLink checks both ends got shm without a link.
func wantNoLink(t *testing.T, what string, con, acc pathResult) {
	t.Helper()
	if con.Kind != pathShm || acc.Kind != pathShm || con.Link >= 0 || acc.Link >= 0 || con.LinkTTL != 0 || acc.LinkTTL != 0 {
		t.Errorf("%s: connector %+v, acceptor %+v; want shm without a link", what, con, acc)
	}
}

// shmAgent starts an agent whose cluster settings are settings, waits
// until it has read them and gives it the test process's ledger.
func shmAgent(t *testing.T, settings string) *testAgent {
	t.Helper()
	a := shmAgentNoLedger(t, settings)
	holdLedger(t, a)
	return a
}

func shmAgentNoLedger(t *testing.T, settings string) *testAgent {
	t.Helper()
	dir := newFakeDir(ffSelf)
	dir.setSettings(settings)
	a := startAgent(t, dir, nil)
	waitSettings(t, a, anySettings)
	return a
}

// holdLedger sends agent a an empty ledger of the test process, as a
// library does before it uses a link, and waits until a holds it.
func holdLedger(t *testing.T, a *testAgent) {
	t.Helper()
	l := newTestLedger(t, 16)
	if err := newLib(t, a).ledger(l.fd); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the agent holds the test process's ledger", func() bool { return a.ledgers.holds(int32(os.Getpid())) })
}

// Both libraries take links and the acceptor's process alone listens: the
// shm channel comes with a link, and the agent keeps no copy of it.
func TestLinkGrantedForSoleListener(t *testing.T) {
	a := shmAgent(t, "")
	srv, cli := newLibCaps(t, a, capsLink), newLibCaps(t, a, capsLink)
	if err := srv.listen("0.0.0.0:8080"); err != nil {
		t.Fatal(err)
	}
	con, acc := meet(t, srv, cli, selfCli(46000), selfSrv)
	t.Cleanup(func() { closeResult(con); closeResult(acc) }) // sees acc.Link = -1 below
	wantShmPair(t, con, acc)
	wantLinkPair(t, con, acc)
	unix.Close(acc.Link)
	acc.Link = -1
	if got, err := readDatagram(con.Link); err != nil || got != "" {
		t.Errorf("link after the acceptor closed its end: %q, %v; want EOF (the agent must hold no copy)", got, err)
	}
}

// A process whose ledger the agent does not hold (it never sent one, or
// its LEDGER was refused) gets its shm channel without a link: what it
// made over one would be in no count. Once its ledger is held, it does.
func TestNoLinkForProcessWithoutLedger(t *testing.T) {
	a := shmAgentNoLedger(t, "")
	srv, cli := newLibCaps(t, a, capsLink), newLibCaps(t, a, capsLink)
	if err := srv.listen(selfSrv); err != nil {
		t.Fatal(err)
	}
	con, acc := meetSelf(t, srv, cli, 46040)
	wantShmPair(t, con, acc)
	wantNoLink(t, "no ledger held", con, acc)

	holdLedger(t, a)
	con, acc = meetSelf(t, srv, cli, 46041)
	wantLinkPair(t, con, acc)
}

// A library that did not say CAPS bit 1, on either side, gets its shm
// channel without a link, and so does its peer.
func TestNoLinkWithoutCapsLink(t *testing.T) {
	a := shmAgent(t, "")
	for i, c := range []struct {
		name             string
		conCaps, accCaps uint32
	}{
		{"connector-without-link", protocol.CapShm, capsLink},
		{"acceptor-without-link", capsLink, protocol.CapShm},
	} {
		srv, cli := newLibCaps(t, a, c.accCaps), newLibCaps(t, a, c.conCaps)
		if err := srv.listen(selfSrv); err != nil {
			t.Fatal(err)
		}
		con, acc := meetSelf(t, srv, cli, 46010+i)
		wantShmPair(t, con, acc)
		wantNoLink(t, c.name, con, acc)
	}
}

// A listener registered by another process too that accepts on it (forked
// workers), or only by another process, gets no link: that process could
// accept the offered connection. Once the acceptor's process is the only
// one, it does.
func TestNoLinkForSharedListener(t *testing.T) {
	a := shmAgent(t, "")
	other := startAsker(t, "", askSpec{Sock: a.cfg.LibrarySocket(), Caps: capsLink, Listen: "0.0.0.0:8080",
		Ask: "accept", Local: selfSrv, Remote: selfCli(46029)})
	other.goAhead()
	if r := other.result(t); r.Path != "overlay" || r.Err != "" {
		t.Fatalf("the other process's ACCEPT, with no connector: %+v; want the overlay", r)
	}
	srv, cli := newLibCaps(t, a, capsLink), newLibCaps(t, a, capsLink)
	if err := srv.listen(selfSrv); err != nil {
		t.Fatal(err)
	}
	if pids, _, _ := a.listeners.live(ffSelf.ID, 8080); len(pids) != 2 {
		t.Fatalf("listener registered by pids %v; want the test process and the child", pids)
	}
	con, acc := meetSelf(t, srv, cli, 46020)
	wantShmPair(t, con, acc)
	wantNoLink(t, "listener of two processes", con, acc)

	if err := srv.unlisten(selfSrv); err != nil {
		t.Fatal(err)
	}
	con, acc = meetSelf(t, srv, cli, 46021)
	wantNoLink(t, "listener of another process only", con, acc)

	other.finish()
	if err := srv.listen(selfSrv); err != nil {
		t.Fatal(err)
	}
	con, acc = meetSelf(t, srv, cli, 46022)
	wantLinkPair(t, con, acc)
}

// A pre-forking server (nginx, gunicorn): its master registered the
// listener too (it made the socket, the worker inherited it) but never
// accepts on it. The worker is the listener's only acceptor: its
// connections get links. Once the master accepts one too, they do not.
func TestLinkForListenerWhoseOtherProcessNeverAccepts(t *testing.T) {
	a := shmAgent(t, "")
	master := startAsker(t, "", askSpec{Sock: a.cfg.LibrarySocket(), Caps: capsLink, Listen: "0.0.0.0:8080",
		Ask: "accept", Local: selfSrv, Remote: selfCli(46039)}) // registers, then waits for its go
	worker, cli := newLibCaps(t, a, capsLink), newLibCaps(t, a, capsLink)
	if err := worker.listen(selfSrv); err != nil {
		t.Fatal(err)
	}
	if pids, _, _ := a.listeners.live(ffSelf.ID, 8080); len(pids) != 2 {
		t.Fatalf("listener registered by pids %v; want the test process and the child", pids)
	}
	con, acc := meetSelf(t, worker, cli, 46030)
	wantLinkPair(t, con, acc)

	master.goAhead()
	if r := master.result(t); r.Path != "overlay" || r.Err != "" {
		t.Fatalf("the master's ACCEPT, with no connector: %+v; want the overlay", r)
	}
	con, acc = meetSelf(t, worker, cli, 46031)
	wantNoLink(t, "listener the master accepted on too", con, acc)
}

// A container charged half its budget or more, this channel included,
// still gets shm within its budget but no link. Both ends are the same
// container here, so each channel is charged to it twice: with a budget
// of 6 channels, the first channel leaves it at 2 (a link), the second
// at 4 (none).
func TestNoLinkAtHalfBudget(t *testing.T) {
	a := shmAgent(t, fmt.Sprintf(`{"shm_budget": %d}`, 6*shmBytes))
	srv, cli := newLibCaps(t, a, capsLink), newLibCaps(t, a, capsLink)
	if err := srv.listen(selfSrv); err != nil {
		t.Fatal(err)
	}
	con, acc := meetSelf(t, srv, cli, 46030)
	wantLinkPair(t, con, acc)
	con, acc = meetSelf(t, srv, cli, 46031)
	wantShmPair(t, con, acc)
	wantNoLink(t, "at half the budget", con, acc)
}

// A parked meeting (simultaneous connects) gets no link: its acceptor did
// not ask, so nothing says its process is the one that will accept.
func TestNoLinkForParkedMeeting(t *testing.T) {
	a := shmAgent(t, "")
	ca, cb, aa, ba := crossedPairs(t, a, capsLink, selfIP+":7301", selfIP+":7302", selfCli(46041), selfCli(46042))
	wantNoLink(t, "A to B", ca, ba)
	wantNoLink(t, "B to A", cb, aa)
}

// PATH carries a half's link third, after the bell socket and the memfd,
// and a half closed untaken closes its link.
func TestLinkIsThirdFdAndClosedWithHalf(t *testing.T) {
	hs, err := newShmHalves(shmRingSize)
	if err != nil {
		t.Fatal(err)
	}
	link, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	hs[0].link, hs[1].link = link[0], link[1]
	for _, h := range hs {
		if got := h.fds(); fmt.Sprint(got) != fmt.Sprint([]int{h.fd, h.mem, h.link}) {
			t.Fatalf("half %+v: PATH carries %v; want the bell socket, the memfd, then the link", h, got)
		}
	}
	closeHalves(hs)
	for _, fd := range link {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != unix.EBADF {
			t.Errorf("the link of a closed half is still open: %v", err)
		}
	}
}

// LINK_OFFER travels between libraries only: the agent answers it ERROR
// INVALID, saying so, and the session stays usable.
func TestLinkOfferToAgentRefused(t *testing.T) {
	a := shmAgent(t, "")
	cli := newLibCaps(t, a, capsLink)
	_, _, err := cli.call(protocol.New(protocol.TypeLinkOffer, 0,
		protocol.Endpoint(protocol.AttrLocalEndpoint, netip.MustParseAddrPort(selfCli(46300))),
		protocol.Endpoint(protocol.AttrRemoteEndpoint, netip.MustParseAddrPort(selfSrv))))
	wantCode(t, err, protocol.CodeInvalid)
	var pe *protocol.Error
	if errors.As(err, &pe); !strings.Contains(pe.Msg(), "never to the agent") {
		t.Errorf("ERROR says %q; want it to say LINK_OFFER is not for the agent", pe.Msg())
	}
	wantNoReplies(t, cli)
}

// crossedPairs has two processes with caps, listening on lisA and lisB,
// connect to each other at once (from aCli and bCli) and then accept:
// A's connect (ca) pairs with B's accept (ba), B's (cb) with A's (aa).
// The results are closed when the test ends.
func crossedPairs(t *testing.T, a *testAgent, caps uint32, lisA, lisB, aCli, bCli string) (ca, cb, aa, ba pathResult) {
	t.Helper()
	procA, procB := newLibCaps(t, a, caps), newLibCaps(t, a, caps)
	if err := procA.listen(lisA); err != nil {
		t.Fatal(err)
	}
	if err := procB.listen(lisB); err != nil {
		t.Fatal(err)
	}
	ca, cb = crossConnect(t, procA, procB, aCli, lisB, bCli, lisA)
	aa, err := procA.accept(lisA, bCli)
	if err != nil {
		t.Fatal(err)
	}
	ba, err = procB.accept(lisB, aCli)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeResult(aa); closeResult(ba) }) // crossConnect closes ca and cb
	return ca, cb, aa, ba
}
