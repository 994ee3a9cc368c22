package agent

// Design note: cross-host links (PROTOCOL.md, "Cross-host links").
//
// A cross-host connection set up through the agents costs each agent about
// 350 µs of CPU (offer, meeting, commit, handing). A cross-host link lets
// a connecting and an accepting process on two hosts set up their next
// connections without either agent on the path, as a same-host link does
// (shm.go): the accepting process holds a listener on its host's fabric
// address, the connecting process a stock of connections to it, and each
// new connection is offered, taken and committed on one stock connection
// by the two libraries.
//
// The grant rides on a host-tcp answer to an OFFER. The connector's agent
// says CAPS bit 2 in its OFFER when the connecting session's HELLO did and
// it holds that process's ledger. The acceptor's agent (meetOffer) grants
// when the OFFER said so, the meeting is not parked, the accepting process
// alone registered the listener and sent its ledger (linkListener: stricter
// than same-host links, whose listener others may hold if they never
// accept) and its session said CAPS bit 2: it makes a listener on its fabric address, marked for
// the fabric guard (guard.go), and a random token, signs both into its
// PATH and, after the COMMIT, hands the listener with the connection. A
// listener nobody takes is closed with its half (no COMMIT, a meeting
// decided twice). The connector's agent, once it committed, keeps a
// record of the link (the connecting process, the listener's address, the
// token) for LINK_TTL under a random name, which the connecting library
// gets as LINK, with the TOKEN.
//
// With that name the library asks LINK_FILL for stock connections. That
// is the agent's only cost per connection left, amortised over COUNT, so
// it is kept cheap: the connections are dialed all at once on
// non-blocking sockets and waited for in one poll loop, no goroutine or
// thread per socket, and each is only marked for the fabric guard: the
// agent writes nothing on it. The connecting library's LINK_OFFER is its
// first data and carries the token, which the accepting library checks,
// so a connection costs one packet and one write less than a hello from
// the agent would. A refused dial means the listener is gone (the
// accepting process closed it, exited, forked, or its link expired), so
// the record goes with it.

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/freeflow-net/freeflow/internal/protocol"
	"golang.org/x/sys/unix"
)

const (
	// maxXLinksPerContainer bounds the connector agent's records of one
	// container's processes (limits.go): a link is granted per pair of
	// processes and lives LINK_TTL unless used, so a real program holds a
	// few; a grant beyond it is not recorded, and that connection goes
	// without a link.
	maxXLinksPerContainer = 1024
	// maxStockFill is the most stock connections one LINK_FILL asks for.
	maxStockFill = 16
	// fillsPerContainer bounds one container's LINK_FILLs in flight, each
	// holding up to maxStockFill sockets for up to stockDialWait: a
	// process refills its stock long before it runs out, so a few at once
	// are plenty.
	fillsPerContainer = 16
	// stockDialWait bounds a LINK_FILL's dials.
	stockDialWait = 100 * time.Millisecond
	// xlinkBacklog is the link listener's listen() backlog.
	xlinkBacklog   = 128
	xlinkTokenSize = 16 // TOKEN, random
)

// errXLinkGone is the answer to a LINK_FILL for a link the caller does
// not hold (any more).
func errXLinkGone() error {
	return protocol.Errorf(protocol.CodeNotFound, "the link expired or is not yours; connect through the agent")
}

// xlinkGrant is a cross-host link the acceptor's agent grants with its
// host-tcp answer to an OFFER: the listener and its token.
type xlinkGrant struct {
	ln    int
	port  uint16
	token []byte
}

// grantXLink returns a new cross-host link for offer p's meeting m on
// listener lis when the rules for one hold (the design note above), or
// nil.
func (a *Agent) grantXLink(p *offerPeer, m *meeting, lis listenerKey) *xlinkGrant {
	if !p.xlink {
		return nil
	}
	a.rv.mu.Lock()
	acc, parked := m.libs[sideAcceptor], m.park
	a.rv.mu.Unlock()
	if !acc.xlink || !a.linkListener(parked, acc, lis, false) {
		return nil
	}
	g, err := a.newXLinkGrant()
	if err != nil {
		a.log.Warn("make a cross-host link's listener; the connection goes without a link", "err", err)
		return nil
	}
	return g
}

// newXLinkGrant makes a link listener on this host's fabric address, port
// 0, marked for the fabric guard, whose connections end without TIME_WAIT
// (endOnceAcked: they inherit it), and a random token.
func (a *Agent) newXLinkGrant() (*xlinkGrant, error) {
	ip, err := a.fabric4()
	if err != nil {
		return nil, err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	g := &xlinkGrant{ln: fd, token: make([]byte, xlinkTokenSize)}
	if err := endOnceAcked(fd); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := g.listen(ip); err != nil {
		unix.Close(fd)
		return nil, err
	}
	rand.Read(g.token)
	return g, nil
}

func (g *xlinkGrant) listen(ip [4]byte) error {
	if err := unix.Bind(g.ln, &unix.SockaddrInet4{Addr: ip}); err != nil {
		return fmt.Errorf("bind to %v:0: %w", netip.AddrFrom4(ip), err)
	}
	if err := unix.Listen(g.ln, xlinkBacklog); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if err := markListener(g.ln); err != nil {
		return err
	}
	sa, err := unix.Getsockname(g.ln)
	if err != nil {
		return fmt.Errorf("getsockname: %w", err)
	}
	g.port = uint16(sa.(*unix.SockaddrInet4).Port)
	return nil
}

// attrs returns what the signed PATH answering the OFFER says of g: none
// for no grant.
func (g *xlinkGrant) attrs() []protocol.Attr {
	if g == nil {
		return nil
	}
	return []protocol.Attr{protocol.U16BE(protocol.AttrLinkPort, g.port), {Type: protocol.AttrToken, Value: g.token}}
}

// half returns the accepting library's half with g, its connection not
// yet set: closing it closes the listener.
func (g *xlinkGrant) half() half {
	if g == nil {
		return noHalf
	}
	h := noHalf
	h.xlinkListener, h.token = g.ln, g.token
	return h
}

// xlinkAsk carries a cross-host link through one offer exchange of a
// connecting library that takes one (nil for one that does not): its
// process, and the name and token of the link granted (0 and nil for
// none).
type xlinkAsk struct {
	id    string // the connecting process's container
	pid   int32
	name  uint64
	token []byte
}

// xlinkRecord is the connector agent's record of a cross-host link.
type xlinkRecord struct {
	id     string         // the connecting process's container
	pid    int32          // the connecting process
	peer   netip.AddrPort // the acceptor host's fabric address and LINK_PORT
	token  []byte
	expiry time.Time
}

// xlinks is the connector agent's table of cross-host links, by name.
type xlinks struct {
	mu        sync.Mutex
	m         map[uint64]xlinkRecord
	held      map[string]int // records per container
	lastPrune time.Time
}

func newXLinks() *xlinks { return &xlinks{m: map[uint64]xlinkRecord{}, held: map[string]int{}} }

// recordXLink keeps the link the acceptor agent's reply on c grants to
// x's process, and sets x's name and token; it leaves them unset if the
// reply grants none or the table is full.
func (a *Agent) recordXLink(x *xlinkAsk, c *net.TCPConn, reply *protocol.Message) {
	port, err := reply.U16BE(protocol.AttrLinkPort)
	token, ok := reply.Get(protocol.AttrToken)
	peer := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	if err != nil || port == 0 || !ok || !peer.Is4() {
		return
	}
	now := time.Now()
	r := xlinkRecord{id: x.id, pid: x.pid, peer: netip.AddrPortFrom(peer, port), token: bytes.Clone(token), expiry: now.Add(linkTTL)}
	if x.name = a.xlinks.add(r, now); x.name != 0 {
		x.token = r.token
	}
}

// add records r under a new random nonzero name and returns the name, or
// 0 if r's container holds maxXLinksPerContainer live links.
func (x *xlinks) add(r xlinkRecord, now time.Time) uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.held[r.id] >= maxXLinksPerContainer && now.Sub(x.lastPrune) >= linkTTL/20 { // swept at most every 100 ms
		x.lastPrune = now
		for name, old := range x.m {
			if !now.Before(old.expiry) {
				x.deleteLocked(name)
			}
		}
	}
	if x.held[r.id] >= maxXLinksPerContainer {
		return 0
	}
	var b [8]byte
	for {
		rand.Read(b[:])
		name := binary.LittleEndian.Uint64(b[:])
		if _, used := x.m[name]; name != 0 && !used {
			x.m[name] = r
			x.held[r.id]++
			return name
		}
	}
}

func (x *xlinks) deleteLocked(name uint64) {
	r, ok := x.m[name]
	if !ok {
		return
	}
	delete(x.m, name)
	if x.held[r.id]--; x.held[r.id] <= 0 {
		delete(x.held, r.id)
	}
}

// get returns link name if it is process pid's and has not expired.
func (x *xlinks) get(name uint64, pid int32, now time.Time) (xlinkRecord, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	r, ok := x.m[name]
	if ok && !now.Before(r.expiry) {
		x.deleteLocked(name)
		return r, false
	}
	return r, ok && r.pid == pid
}

func (x *xlinks) drop(name uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.deleteLocked(name)
}

// handleLinkFill answers LINK_FILL with up to COUNT new stock connections
// of the caller's cross-host link, in PATH host-tcp.
func (s *session) handleLinkFill(m *protocol.Message) (*protocol.Message, error) {
	if err := s.libraryRequest(m.Type); err != nil {
		return nil, err
	}
	name, err := m.U64(protocol.AttrLink)
	if err != nil {
		return nil, err
	}
	count, err := m.U32(protocol.AttrCount)
	if err != nil {
		return nil, err
	}
	if count < 1 || count > maxStockFill {
		return nil, protocol.Errorf(protocol.CodeInvalid, "LINK_FILL asks for %d stock connections; ask for 1 to %d", count, maxStockFill)
	}
	r, ok := s.a.xlinks.get(name, s.pid, time.Now())
	if !ok {
		return nil, errXLinkGone()
	}
	if !s.a.fills.take(s.self.ID) {
		return nil, protocol.Errorf(protocol.CodeUnavailable,
			"container %s has %d LINK_FILLs in flight, its limit; connect through the agent", s.self.ID, fillsPerContainer)
	}
	defer s.a.fills.release(s.self.ID)
	fds, refused, why := s.a.dialStock(r, int(count))
	if refused {
		protocol.CloseFDs(fds)
		s.a.xlinks.drop(name)
		return nil, errXLinkGone()
	}
	if len(fds) == 0 {
		return nil, protocol.Errorf(protocol.CodeUnavailable,
			"no stock connection to %s connected within %v (%v); connect through the agent", r.peer, stockDialWait, why)
	}
	s.outFDs = fds
	return protocol.New(protocol.TypePath, m.Seq, protocol.U8(protocol.AttrPathKind, pathHostTCP)), nil
}

// dialStock dials n connections from this host's fabric address to r's
// listener at once and returns those that connected within stockDialWait,
// each checked and marked (openStock). refused says a dial was refused:
// the listener is gone. why is the first other failure.
func (a *Agent) dialStock(r xlinkRecord, n int) (fds []int, refused bool, why error) {
	local, err := a.fabric4()
	if err != nil {
		return nil, false, err
	}
	failed := func(fd int, err error) {
		closeFD(fd)
		refused = refused || errors.Is(err, unix.ECONNREFUSED)
		if why == nil {
			why = err
		}
	}
	to := &unix.SockaddrInet4{Port: int(r.peer.Port()), Addr: r.peer.Addr().As4()}
	pending := make([]unix.PollFd, 0, n)
	for range n {
		fd, err := startDial(local, to)
		if err != nil {
			failed(fd, err)
			continue
		}
		pending = append(pending, unix.PollFd{Fd: int32(fd), Events: unix.POLLOUT})
	}
	deadline := time.Now().Add(stockDialWait)
	for len(pending) > 0 {
		wait := time.Until(deadline)
		if wait <= 0 {
			break
		}
		if _, err := unix.Poll(pending, int((wait+time.Millisecond-1)/time.Millisecond)); err != nil && err != unix.EINTR {
			why = fmt.Errorf("poll: %w", err)
			break
		}
		rest := pending[:0]
		for _, p := range pending {
			if p.Revents == 0 {
				rest = append(rest, unix.PollFd{Fd: p.Fd, Events: unix.POLLOUT})
			} else if err := openStock(int(p.Fd)); err != nil {
				failed(int(p.Fd), err)
			} else {
				fds = append(fds, int(p.Fd))
			}
		}
		pending = rest
	}
	for _, p := range pending {
		failed(int(p.Fd), fmt.Errorf("connect to %s: no answer within %v", r.peer, stockDialWait))
	}
	return fds, refused, why
}

// startDial starts a non-blocking connect from local to to. The socket
// is returned with any error, for the caller to close (-1 if none was made).
func startDial(local [4]byte, to *unix.SockaddrInet4) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	// The port is chosen at connect, for this destination, so a stock
	// shares the ephemeral ports with connections to other destinations.
	unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
	if err := endOnceAcked(fd); err != nil {
		return fd, err
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: local}); err != nil {
		return fd, fmt.Errorf("bind to %v: %w", netip.AddrFrom4(local), err)
	}
	if err := unix.Connect(fd, to); err != nil && err != unix.EINPROGRESS {
		return fd, fmt.Errorf("connect: %w", err)
	}
	return fd, nil
}

// openStock finishes a stock connection whose connect poll reported: it
// must have connected; then the fabric guard's mark. Nothing is written:
// the library's LINK_OFFER is the connection's first data.
func openStock(fd int) error {
	if soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || soerr != 0 {
		if err == nil {
			err = unix.Errno(soerr)
		}
		return fmt.Errorf("connect: %w", err)
	}
	return markConnected(fd)
}

// fabric4 returns this host's fabric address, which a cross-host link
// needs as IPv4 (PROTOCOL.md: its listener is AF_INET).
func (a *Agent) fabric4() ([4]byte, error) {
	ip, err := netip.ParseAddr(a.cfg.FabricIP)
	if err != nil || !ip.Unmap().Is4() {
		return [4]byte{}, fmt.Errorf("this host's fabric IP %q is no IPv4 address", a.cfg.FabricIP)
	}
	return ip.Unmap().As4(), nil
}
