package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/protocol"
)

// libClient plays the network library: one session on the library socket.
type libClient struct {
	conn *protocol.Conn
	seq  uint32
}

// pathResult is a PATH answer as a library sees it.
type pathResult struct {
	Kind    uint8
	Reason  string
	FD      int    // -1 without a descriptor
	Mem     int    // shm: the memfd; -1 otherwise
	Link    int    // shm with a link: its end; host-tcp with a cross-host link, acceptor: its listener; -1 otherwise
	LinkTTL uint32 // LINK_TTL, 0 if absent
	Token   []byte // host-tcp with a cross-host link (either end): TOKEN; nil if absent
	XLink   uint64 // host-tcp with a cross-host link, connector: LINK; 0 if absent
	Elapsed time.Duration
}

// dialLib opens a session of a library that sends HELLO without CAPS.
func dialLib(path string) (*libClient, error) { return dialLibCaps(path, 0) }

// dialLibCaps opens a session whose HELLO says CAPS caps (none if 0).
func dialLibCaps(path string, caps uint32) (*libClient, error) {
	c, err := protocol.Dial(path)
	if err != nil {
		return nil, err
	}
	l := &libClient{conn: c}
	hello := protocol.New(protocol.TypeHello, 0)
	if caps != 0 {
		hello.Attrs = append(hello.Attrs, protocol.U32(protocol.AttrCaps, caps))
	}
	if _, _, err := l.call(hello); err != nil {
		c.Close()
		return nil, err
	}
	return l, nil
}

// newLib opens a session of this process, closed when the test ends.
func newLib(t testing.TB, a *testAgent) *libClient { return newLibCaps(t, a, 0) }

// newLibCaps is newLib for a library that says CAPS caps.
func newLibCaps(t testing.TB, a *testAgent, caps uint32) *libClient {
	t.Helper()
	l, err := dialLibCaps(a.cfg.LibrarySocket(), caps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.conn.Close() })
	return l
}

// call sends request m with fds attached (the caller keeps them) and
// returns the answer and the descriptors it carries, or the agent's error.
func (l *libClient) call(m *protocol.Message, fds ...int) (*protocol.Message, []int, error) {
	l.seq++
	m.Seq = l.seq
	l.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	l.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if err := l.conn.WriteMsg(m, fds...); err != nil {
		return nil, nil, err
	}
	r, fds, err := l.conn.ReadMsg()
	if err != nil {
		return nil, nil, err
	}
	if r.Seq != m.Seq {
		protocol.CloseFDs(fds)
		return nil, nil, fmt.Errorf("%v answered with %v of seq %d, want seq %d", m.Type, r.Type, r.Seq, m.Seq)
	}
	if e := r.Err(); e != nil {
		protocol.CloseFDs(fds)
		return nil, nil, e
	}
	return r, fds, nil
}

func (l *libClient) listen(ep string) error {
	_, _, err := l.call(protocol.New(protocol.TypeListen, 0, protocol.Endpoint(protocol.AttrLocalEndpoint, netip.MustParseAddrPort(ep))))
	return err
}

func (l *libClient) unlisten(ep string) error {
	_, _, err := l.call(protocol.New(protocol.TypeUnlisten, 0, protocol.Endpoint(protocol.AttrLocalEndpoint, netip.MustParseAddrPort(ep))))
	return err
}

// closed sends CLOSED, a notification: the agent does not answer it.
func (l *libClient) closed(local, remote string) error {
	return l.notify(protocol.New(protocol.TypeClosed, 0,
		protocol.Endpoint(protocol.AttrLocalEndpoint, netip.MustParseAddrPort(local)),
		protocol.Endpoint(protocol.AttrRemoteEndpoint, netip.MustParseAddrPort(remote))))
}

// ledger sends LEDGER carrying fds (one, the ledger memfd, unless a test
// says otherwise), a notification: the agent does not answer it.
func (l *libClient) ledger(fds ...int) error {
	return l.notify(protocol.New(protocol.TypeLedger, 0), fds...)
}

func (l *libClient) notify(m *protocol.Message, fds ...int) error {
	l.seq++
	m.Seq = l.seq
	l.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	return l.conn.WriteMsg(m, fds...)
}

// lookup asks about ip; its reply also shows that every notification sent
// before it on this session has been applied (one session is served in order).
func (l *libClient) lookup(ip string) (*protocol.Message, error) {
	r, _, err := l.call(protocol.New(protocol.TypeLookup, 0, protocol.IP(netip.MustParseAddr(ip))))
	return r, err
}

// ask sends CONNECT or ACCEPT and returns the PATH answer.
func (l *libClient) ask(t protocol.Type, local, remote string) (pathResult, error) {
	start := time.Now()
	r, fds, err := l.call(protocol.New(t, 0,
		protocol.Endpoint(protocol.AttrLocalEndpoint, netip.MustParseAddrPort(local)),
		protocol.Endpoint(protocol.AttrRemoteEndpoint, netip.MustParseAddrPort(remote))))
	res := pathResult{FD: -1, Mem: -1, Link: -1, Elapsed: time.Since(start)}
	if err != nil {
		return res, err
	}
	if r.Type != protocol.TypePath {
		protocol.CloseFDs(fds)
		return res, fmt.Errorf("%v answered with %v", t, r.Type)
	}
	kind, _ := r.Get(protocol.AttrPathKind)
	res.Kind = kind[0]
	res.Reason, _ = r.String(protocol.AttrReason)
	res.LinkTTL, _ = r.U32(protocol.AttrLinkTTL)
	res.Token, _ = r.Get(protocol.AttrToken)
	res.XLink, _ = r.U64(protocol.AttrLink)
	switch {
	case res.Kind == pathOverlay && len(fds) == 0:
	case res.Kind == pathShm && len(fds) == 2 && res.LinkTTL == 0:
		res.FD, res.Mem = fds[0], fds[1]
	case res.Kind == pathShm && len(fds) == 3 && res.LinkTTL != 0:
		res.FD, res.Mem, res.Link = fds[0], fds[1], fds[2]
	case res.Kind == pathHostTCP && len(fds) == 2 && res.LinkTTL != 0 && res.Token != nil:
		res.FD, res.Link = fds[0], fds[1]
	case res.Kind != pathOverlay && res.Kind != pathShm && len(fds) == 1:
		res.FD = fds[0]
	default:
		protocol.CloseFDs(fds)
		return res, fmt.Errorf("PATH kind %d (LINK_TTL %d) came with %d descriptors", res.Kind, res.LinkTTL, len(fds))
	}
	return res, nil
}

// fill sends LINK_FILL for link name and returns the stock connections
// its PATH host-tcp carries.
func (l *libClient) fill(name uint64, count uint32) ([]int, error) {
	r, fds, err := l.call(protocol.New(protocol.TypeLinkFill, 0, protocol.U64(protocol.AttrLink, name), protocol.U32(protocol.AttrCount, count)))
	if err != nil {
		return nil, err
	}
	if kind, _ := r.U8(protocol.AttrPathKind); r.Type != protocol.TypePath || kind != pathHostTCP {
		protocol.CloseFDs(fds)
		return nil, fmt.Errorf("LINK_FILL answered with %v kind %d, want PATH host-tcp", r.Type, kind)
	}
	return fds, nil
}

func (l *libClient) connect(local, remote string) (pathResult, error) {
	return l.ask(protocol.TypeConnect, local, remote)
}

func (l *libClient) accept(local, remote string) (pathResult, error) {
	return l.ask(protocol.TypeAccept, local, remote)
}

// exchange checks that a and b are the two ends of one stream: bytes
// written on each arrive on the other.
func exchange(a, b int) error {
	for _, dir := range [][2]int{{a, b}, {b, a}} {
		msg := []byte(fmt.Sprintf("hello from fd %d", dir[0]))
		if _, err := syscall.Write(dir[0], msg); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		got, err := readFull(dir[1], len(msg))
		if err != nil {
			return err
		}
		if string(got) != string(msg) {
			return fmt.Errorf("read %q, want %q", got, msg)
		}
	}
	return nil
}

// readFull reads n bytes from fd within 5 seconds. A handed TCP socket
// may come non-blocking (the library sets the application's mode).
func readFull(fd, n int) ([]byte, error) {
	syscall.SetNonblock(fd, false)
	tv := syscall.Timeval{Sec: 5}
	syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	buf := make([]byte, n)
	for got := 0; got < n; {
		m, err := syscall.Read(fd, buf[got:])
		if err != nil {
			return nil, fmt.Errorf("read: %w", err)
		}
		if m == 0 {
			return nil, errors.New("read: EOF")
		}
		got += m
	}
	return buf, nil
}

// socketDomain returns the address family of socket fd.
func socketDomain(fd int) int {
	d, _ := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_DOMAIN)
	return d
}
