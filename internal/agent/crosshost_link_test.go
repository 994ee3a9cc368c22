package agent

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/protocol"
	"golang.org/x/sys/unix"
)

// Cross-host links (crosshost_link.go): the grant on a host-tcp meeting between
// h1 (connector) and h2 (acceptor), and LINK_FILL on h1. The test process
// plays both libraries, as in crosshost_test.go.

// meetCross has srv (on h2) accept and cli (on h1) connect the connection
// from selfCli(cport) to srv2, both at once; the test closes the results.
func meetCross(t *testing.T, cli, srv *libClient, cport int) (con, acc pathResult) {
	t.Helper()
	con, acc = meet(t, srv, cli, selfCli(cport), srv2)
	if con.Kind != pathHostTCP || acc.Kind != pathHostTCP {
		closeResult(con)
		closeResult(acc)
		t.Fatalf("connect %+v, accept %+v; want host-tcp for both", con, acc)
	}
	if err := exchange(con.FD, acc.FD); err != nil {
		t.Fatalf("the two ends are not one TCP connection: %v", err)
	}
	return con, acc
}

// grantedXLink registers srv2 on h2 for a library that takes cross-host
// links, meets one from h1, checks the link was granted and returns the
// connecting library with both answers, which the caller closes.
func grantedXLink(t *testing.T, hs twoHosts, cport int) (*libClient, pathResult, pathResult) {
	t.Helper()
	srv, cli := newLibCaps(t, hs.h2, protocol.CapXLink), newLibCaps(t, hs.h1, protocol.CapXLink)
	if err := srv.listen(srv2); err != nil {
		t.Fatal(err)
	}
	con, acc := meetCross(t, cli, srv, cport)
	defer func() {
		if t.Failed() {
			closeResult(con)
			closeResult(acc)
		}
	}()
	wantXLinkGranted(t, hs, con, acc)
	return cli, con, acc
}

// wantXLinkGranted checks con and acc carry a cross-host link: LINK_TTL
// 2000 and one TOKEN of 16 bytes for both (the connecting library writes
// it in its offers, the accepting library checks it), a name for the
// connector, and for the acceptor a listener on h2's fabric address that
// carries the fabric guard's listener mark.
func wantXLinkGranted(t *testing.T, hs twoHosts, con, acc pathResult) {
	t.Helper()
	if acc.LinkTTL != 2000 || acc.Link < 0 || len(acc.Token) != 16 || acc.XLink != 0 {
		t.Fatalf("accepting library got %+v; want host-tcp with LINK_TTL 2000, a listener and a 16-byte TOKEN", acc)
	}
	if con.LinkTTL != 2000 || con.XLink == 0 || con.Link >= 0 || !bytes.Equal(con.Token, acc.Token) {
		t.Fatalf("connecting library got %+v; want host-tcp with LINK_TTL 2000, LINK and the accepting library's TOKEN %x, no listener", con, acc.Token)
	}
	lis := listenerAddr(t, acc.Link)
	if listening, _ := unix.GetsockoptInt(acc.Link, unix.SOL_SOCKET, unix.SO_ACCEPTCONN); listening != 1 || lis.Addr().String() != hs.h2.cfg.FabricIP {
		t.Errorf("link listener on %v, listening %d; want a listening socket on h2's fabric address %s", lis, listening, hs.h2.cfg.FabricIP)
	}
	if mark, err := unix.GetsockoptInt(acc.Link, unix.SOL_SOCKET, unix.SO_MARK); err != nil || mark != fabricMarkListener {
		t.Errorf("link listener's mark %#x (%v); want the listener mark %#x", mark, err, fabricMarkListener)
	}
}

// wantNoXLink checks both ends got host-tcp without a cross-host link.
func wantNoXLink(t *testing.T, what string, con, acc pathResult) {
	t.Helper()
	for _, r := range []pathResult{con, acc} {
		if r.Kind != pathHostTCP || r.LinkTTL != 0 || r.XLink != 0 || r.Token != nil || r.Link >= 0 {
			t.Errorf("%s: connecting library got %+v, accepting library %+v; want host-tcp without a link", what, con, acc)
			return
		}
	}
}

func listenerAddr(t *testing.T, fd int) netip.AddrPort {
	t.Helper()
	sa, err := unix.Getsockname(fd)
	in, ok := sa.(*unix.SockaddrInet4)
	if err != nil || !ok {
		t.Fatalf("link listener's address: %v, %v; want IPv4", sa, err)
	}
	return netip.AddrPortFrom(netip.AddrFrom4(in.Addr), uint16(in.Port))
}

// The grant, and LINK_FILL on it: COUNT connections from h1's fabric
// address to the listener the accepting library got, each marked as a
// handed connection, with no byte from the agent on it (the connecting
// library's LINK_OFFER is its first data), then carrying bytes both ways.
func TestXLinkFillDialsStockToAcceptorsListener(t *testing.T) {
	hs := startTwoHosts(t, nil)
	cli, con, acc := grantedXLink(t, hs, 49000)
	t.Cleanup(func() { closeResult(con); closeResult(acc) })
	fds, err := cli.fill(con.XLink, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { protocol.CloseFDs(fds) })
	if len(fds) != 3 {
		t.Fatalf("LINK_FILL COUNT 3 gave %d connections", len(fds))
	}
	lis := listenerAddr(t, acc.Link)
	stock := map[netip.AddrPort]int{}
	for _, fd := range fds {
		local, remote := sockAddrs(t, fd)
		mark, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_MARK)
		if remote != lis || local.Addr().String() != hs.h1.cfg.FabricIP || mark != fabricMarkConnected {
			t.Errorf("stock connection %v -> %v, mark %#x; want h1's fabric address to the link listener %v, mark %#x",
				local, remote, mark, lis, fabricMarkConnected)
		}
		stock[local] = fd
	}
	unix.SetsockoptTimeval(acc.Link, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
	ends := map[int]int{} // the accepting library's end of each stock connection: the connector's end
	for range fds {
		nfd, _, err := unix.Accept4(acc.Link, unix.SOCK_CLOEXEC)
		if err != nil {
			t.Fatalf("accept on the link listener: %v", err)
		}
		defer unix.Close(nfd)
		_, peer := sockAddrs(t, nfd)
		fd, ok := stock[peer]
		if !ok {
			t.Fatalf("the link listener accepted a connection from %v, which is no stock connection", peer)
		}
		delete(stock, peer)
		ends[nfd] = fd
	}
	// Bytes the agent wrote before its answer would be here by now; the
	// poll gives a late one time to arrive.
	poll := make([]unix.PollFd, 0, len(ends))
	for nfd := range ends {
		poll = append(poll, unix.PollFd{Fd: int32(nfd), Events: unix.POLLIN})
	}
	unix.Poll(poll, 20)
	for nfd, fd := range ends {
		_, peer := sockAddrs(t, nfd)
		if n, _, err := unix.Recvfrom(nfd, make([]byte, 64), unix.MSG_DONTWAIT); err != unix.EAGAIN {
			t.Errorf("stock connection from %v: a read before the connecting library wrote gave %d bytes (%v); want nothing (EAGAIN): the agent writes nothing on it", peer, n, err)
		}
		if err := exchange(fd, nfd); err != nil {
			t.Errorf("stock connection from %v: %v", peer, err)
		}
	}
}

// No link unless both libraries said CAPS bit 2: the connector's agent
// asks for one only then, the acceptor's agent grants one only then.
func TestXLinkNotGrantedWithoutCapsOnBothSides(t *testing.T) {
	hs := startTwoHosts(t, nil)
	for i, c := range []struct {
		name             string
		conCaps, accCaps uint32
	}{
		{"connector-without-xlink", capsLink, capsLink | protocol.CapXLink},
		{"acceptor-without-xlink", capsLink | protocol.CapXLink, capsLink},
	} {
		srv, cli := newLibCaps(t, hs.h2, c.accCaps), newLibCaps(t, hs.h1, c.conCaps)
		if err := srv.listen(srv2); err != nil {
			t.Fatal(err)
		}
		con, acc := meetCross(t, cli, srv, 49010+i)
		wantNoXLink(t, c.name, con, acc)
		closeResult(con)
		closeResult(acc)
	}
}

// A listener another process registered too gets no cross-host link,
// even if that process never accepted on it (a pre-forking server's
// master; a same-host link it would get): an accepting library takes a
// cross-host offer before the kernel hands it the connection, which that
// process could get. Once the accepting process is the only one, it does.
func TestXLinkNotGrantedForSharedListener(t *testing.T) {
	hs := startTwoHosts(t, nil)
	other := startAsker(t, "", askSpec{Sock: hs.h2.cfg.LibrarySocket(), Caps: protocol.CapXLink, Listen: srv2,
		Ask: "accept", Local: srv2, Remote: selfCli(49029)}) // registers, then waits for a go that never comes
	srv, cli := newLibCaps(t, hs.h2, protocol.CapXLink), newLibCaps(t, hs.h1, protocol.CapXLink)
	if err := srv.listen(srv2); err != nil {
		t.Fatal(err)
	}
	if pids, _, _ := hs.h2.listeners.live(ffSelf2.ID, 5201); len(pids) != 2 {
		t.Fatalf("listener registered by pids %v; want the test process and the child", pids)
	}
	con, acc := meetCross(t, cli, srv, 49020)
	wantNoXLink(t, "listener of two processes", con, acc)
	closeResult(con)
	closeResult(acc)

	other.finish()
	_, con, acc = grantedXLink(t, hs, 49021)
	closeResult(con)
	closeResult(acc)
}

// A process whose ledger its agent does not hold, connecting or
// accepting, gets host-tcp without a cross-host link: what it made over
// one would be in no count. Once both ledgers are held, it does.
func TestXLinkNotGrantedWithoutLedger(t *testing.T) {
	hs := startTwoHosts(t, nil)
	srv, cli := newLibCaps(t, hs.h2, protocol.CapXLink), newLibCaps(t, hs.h1, protocol.CapXLink)
	if err := srv.listen(srv2); err != nil {
		t.Fatal(err)
	}
	for i, h := range []*testAgent{hs.h1, hs.h2} {
		dropLedger(h)
		con, acc := meetCross(t, cli, srv, 49040+i)
		wantNoXLink(t, "no ledger on "+h.cfg.Host, con, acc)
		closeResult(con)
		closeResult(acc)
		holdLedger(t, h)
	}
	con, acc := meetCross(t, cli, srv, 49042)
	wantXLinkGranted(t, hs, con, acc)
	closeResult(con)
	closeResult(acc)
}

// dropLedger drops a's ledger of the test process, as if it never came.
func dropLedger(a *testAgent) {
	a.ledgers.mu.Lock()
	defer a.ledgers.mu.Unlock()
	a.ledgers.dropLocked(int32(os.Getpid()))
}

// A parked meeting (the accepting process waits in a CONNECT of its own)
// gets no link: nothing says its process is the one that will accept.
func TestXLinkNotGrantedForParkedMeeting(t *testing.T) {
	hs := startTwoHosts(t, nil)
	procA, procB := newLibCaps(t, hs.h1, protocol.CapXLink), newLibCaps(t, hs.h2, protocol.CapXLink)
	lisA, lisB, aCli, bCli := selfIP+":7101", ffSelf2.IP+":7102", selfCli(49031), ffSelf2.IP+":49032"
	if err := procA.listen(lisA); err != nil {
		t.Fatal(err)
	}
	if err := procB.listen(lisB); err != nil {
		t.Fatal(err)
	}
	ca, _ := crossConnect(t, procA, procB, aCli, lisB, bCli, lisA) // A's is parked on h2 for sure
	ba, err := procB.accept(lisB, aCli)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeResult(ba) })
	wantPrompt(t, "the parked half", ba, pathHostTCP)
	wantNoXLink(t, "parked meeting", ca, ba)
	if aa, err := procA.accept(lisA, bCli); err == nil { // B's connection: whatever it got
		closeResult(aa)
	}
}

// The link listener goes to the accepting library only with its
// connection, after the COMMIT: its port and TOKEN are those of the
// signed PATH. Without a COMMIT, the agent closes it.
func TestXLinkListenerHandedOnlyAfterCommit(t *testing.T) {
	hs := startTwoHosts(t, nil)
	srv := newLibCaps(t, hs.h2, protocol.CapXLink)
	if err := srv.listen(srv2); err != nil {
		t.Fatal(err)
	}
	offer := func(cport int, then func(h byHand)) (byHand, pathResult) {
		done := make(chan pathResult, 1)
		go func() {
			r, err := srv.accept(srv2, selfCli(cport))
			if err != nil {
				t.Error(err)
			}
			done <- r
		}()
		h := sendOfferByHand(t, hs, cport, protocol.U32(protocol.AttrCaps, protocol.CapXLink))
		then(h)
		acc := <-done
		t.Cleanup(func() { closeResult(acc) })
		return h, acc
	}
	grant := func(h byHand) (uint16, []byte) {
		port, err := h.reply.U16BE(protocol.AttrLinkPort)
		token, _ := h.reply.Get(protocol.AttrToken)
		if err != nil || port == 0 || len(token) != 16 {
			t.Fatalf("h2's PATH host-tcp to an OFFER with CAPS bit 2: LINK_PORT %d (%v), TOKEN %x; want both", port, err, token)
		}
		return port, token
	}

	h, acc := offer(49050, func(h byHand) { h.commit(t, h.key, h.nonce) })
	port, token := grant(h)
	if acc.Kind != pathHostTCP || acc.Link < 0 || listenerAddr(t, acc.Link).Port() != port || !bytes.Equal(acc.Token, token) {
		t.Errorf("after the COMMIT the accepting library got %+v; want host-tcp with the listener on port %d and TOKEN %x", acc, port, token)
	}

	h, acc = offer(49051, func(h byHand) { h.c.CloseWrite() }) // no COMMIT: EOF
	port, _ = grant(h)
	wantNoCommitOverlay(t, "no COMMIT", acc, h)
	ip, _ := hs.h2.fabric4()
	err := dialOnce(hs, netip.AddrPortFrom(netip.AddrFrom4(ip), port))
	if !errors.Is(err, unix.ECONNREFUSED) {
		t.Errorf("connect to the link listener of an uncommitted offer: %v; want it refused (listener closed)", err)
	}
}

// dialOnce connects from h1's fabric address to to and closes.
func dialOnce(hs twoHosts, to netip.AddrPort) error {
	ip, _ := hs.h1.fabric4()
	fd, err := startDial(ip, &unix.SockaddrInet4{Addr: to.Addr().As4(), Port: int(to.Port())})
	defer closeFD(fd)
	if err != nil {
		return err
	}
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	if n, err := unix.Poll(p, 2000); n != 1 || err != nil {
		return errors.New("connect did not finish within 2 s")
	}
	soerr, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if soerr != 0 {
		return unix.Errno(soerr)
	}
	return nil
}

// LINK_FILL is answered NOTFOUND unless the caller's process holds the
// link, unexpired: an unknown name, another process, an expired link.
func TestLinkFillRefusedUnlessCallerHoldsLiveLink(t *testing.T) {
	hs := startTwoHosts(t, nil)
	cli, con, acc := grantedXLink(t, hs, 49060)
	t.Cleanup(func() { closeResult(con); closeResult(acc) })
	wantGone := func(what string, err error) {
		t.Helper()
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != protocol.CodeNotFound || !strings.Contains(pe.Msg(), "connect through the agent") {
			t.Errorf("%s: LINK_FILL gave %v; want NOTFOUND telling the library to connect through the agent", what, err)
		}
	}
	_, err := cli.fill(con.XLink^1, 1)
	wantGone("unknown name", err)
	_, err = cli.fill(0, 1)
	wantGone("name 0", err)
	other := &session{a: hs.h1.Agent, pid: 1, self: ffSelf, hello: true}
	_, err = other.handleLinkFill(protocol.New(protocol.TypeLinkFill, 1, protocol.U64(protocol.AttrLink, con.XLink), protocol.U32(protocol.AttrCount, 1)))
	wantGone("another process", err)
	protocol.CloseFDs(other.outFDs)

	fds, err := cli.fill(con.XLink, 1) // the holder still can
	if err != nil || len(fds) != 1 {
		t.Fatalf("LINK_FILL of the link's process: %d connections, %v; want 1", len(fds), err)
	}
	protocol.CloseFDs(fds)
	hs.h1.xlinks.mu.Lock()
	r := hs.h1.xlinks.m[con.XLink]
	r.expiry = time.Now()
	hs.h1.xlinks.m[con.XLink] = r
	hs.h1.xlinks.mu.Unlock()
	_, err = cli.fill(con.XLink, 1)
	wantGone("expired", err)
	wantNoReplies(t, cli)
}

// COUNT must be 1 to 16, and LINK and COUNT are required: INVALID, and
// the session goes on.
func TestLinkFillRefusesBadCount(t *testing.T) {
	hs := startTwoHosts(t, nil)
	cli, con, acc := grantedXLink(t, hs, 49070)
	t.Cleanup(func() { closeResult(con); closeResult(acc) })
	for _, count := range []uint32{0, 17, 1 << 31} {
		_, err := cli.fill(con.XLink, count)
		wantCode(t, err, protocol.CodeInvalid)
	}
	for _, m := range []*protocol.Message{
		protocol.New(protocol.TypeLinkFill, 0, protocol.U32(protocol.AttrCount, 1)),
		protocol.New(protocol.TypeLinkFill, 0, protocol.U64(protocol.AttrLink, con.XLink)),
	} {
		_, _, err := cli.call(m)
		wantCode(t, err, protocol.CodeInvalid)
	}
	fds, err := cli.fill(con.XLink, 16)
	protocol.CloseFDs(fds)
	if err != nil || len(fds) != 16 {
		t.Errorf("LINK_FILL COUNT 16: %d connections, %v; want 16", len(fds), err)
	}
}

// A refused dial (the accepting library closed its link listener) drops
// the link: NOTFOUND, and the record is gone.
func TestLinkFillRefusedDialDropsLink(t *testing.T) {
	hs := startTwoHosts(t, nil)
	cli, con, acc := grantedXLink(t, hs, 49080)
	t.Cleanup(func() { closeResult(con); closeResult(acc) }) // sees acc.Link = -1 below
	unix.Close(acc.Link)
	acc.Link = -1
	_, err := cli.fill(con.XLink, 4)
	wantCode(t, err, protocol.CodeNotFound)
	hs.h1.xlinks.mu.Lock()
	_, kept := hs.h1.xlinks.m[con.XLink]
	hs.h1.xlinks.mu.Unlock()
	if kept {
		t.Error("the link's record is kept after its listener refused a dial")
	}
}

// A listener that answers no SYN (its accept queue is full) gives
// UNAVAILABLE after the 100 ms bound, and the link stays.
func TestLinkFillUnavailableWhenNothingConnects(t *testing.T) {
	hs := startTwoHosts(t, nil)
	ip, _ := hs.h2.fabric4()
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ln)
	if err := unix.Bind(ln, &unix.SockaddrInet4{Addr: ip}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(ln, 0); err != nil {
		t.Fatal(err)
	}
	lis := listenerAddr(t, ln)
	if err := dialOnce(hs, lis); err != nil { // fills the accept queue of 1
		t.Fatal(err)
	}
	cli := newLibCaps(t, hs.h1, protocol.CapXLink)
	name := hs.h1.xlinks.add(xlinkRecord{pid: int32(os.Getpid()), peer: lis, token: make([]byte, 16), expiry: time.Now().Add(time.Minute)}, time.Now())
	start := time.Now()
	_, err = cli.fill(name, 2)
	if elapsed := time.Since(start); elapsed < stockDialWait || elapsed > stockDialWait+slackMax {
		t.Errorf("LINK_FILL to a listener that answers nothing took %v; want the bound %v", elapsed, stockDialWait)
	}
	wantCode(t, err, protocol.CodeUnavailable)
	if _, ok := hs.h1.xlinks.get(name, int32(os.Getpid()), time.Now()); !ok {
		t.Error("the link was dropped after dials that timed out; only a refused dial drops it")
	}
}

// The table of links is bounded per container: one container full of
// live links records no more (that connection goes without a link), while
// another container's links are still recorded, and expired ones make
// room.
func TestXLinkTableBoundedPerContainerExpiredMakeRoom(t *testing.T) {
	x := newXLinks()
	now := time.Now()
	live := xlinkRecord{id: "hog", pid: 7, expiry: now.Add(linkTTL)}
	for i := range maxXLinksPerContainer {
		r := live
		if i == 0 {
			r.expiry = now.Add(time.Millisecond)
		}
		if x.add(r, now) == 0 {
			t.Fatalf("link %d of %d not recorded", i, maxXLinksPerContainer)
		}
	}
	if name := x.add(live, now); name != 0 {
		t.Fatalf("a container at its limit got link %#x recorded", name)
	}
	other := xlinkRecord{id: "web", pid: 9, expiry: now.Add(linkTTL)}
	if name := x.add(other, now); name == 0 {
		t.Fatal("another container's link was not recorded while one container is at its limit")
	}
	later := now.Add(200 * time.Millisecond)
	name := x.add(live, later)
	if name == 0 {
		t.Fatal("the expired link made no room")
	}
	if _, ok := x.get(name, 7, later); !ok {
		t.Error("the new link is not found for its process")
	}
	if _, ok := x.get(name, 8, later); ok {
		t.Error("the new link is found for another process")
	}
}

// LINK_TAKE and LINK_COMMIT travel on stock connections only: the agent
// answers them ERROR INVALID. 0x1a is reserved: UNKNOWN.
// The session goes on.
func TestStockMessagesToAgentRefused(t *testing.T) {
	a := startAgent(t, newFakeDir(ffSelf), nil)
	cli := newLibCaps(t, a, protocol.CapXLink)
	for _, typ := range []protocol.Type{protocol.TypeLinkTake, protocol.TypeLinkCommit} {
		_, _, err := cli.call(protocol.New(typ, 0))
		wantCode(t, err, protocol.CodeInvalid)
	}
	cli.seq++
	sendBytes(t, cli.conn, header(1, 0x1a, cli.seq, 0)) // the encoder knows no type 0x1a
	cli.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	wantError(t, cli.conn, protocol.CodeUnknown, cli.seq)
	wantNoReplies(t, cli)
}
