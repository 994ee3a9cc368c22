package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
	"golang.org/x/sys/unix"
)

// offerRemote is the connecting side of a cross-host connection: the
// whole exchange with the acceptor's agent, recorded once for k. lib is
// the connecting library; one that takes a cross-host link may get one
// (crosshost_link.go).
func (a *Agent) offerRemote(self, peer directory.Container, k tuple, c *connector, lib asking) (decision, half) {
	m, role := a.rv.join(k, sideConnector, nil, c, asking{})
	switch role {
	case roleDuplicate:
		return overlay(reasonDuplicate), noHalf
	case roleDecided:
		return a.rv.recorded(m), noHalf
	}
	a.rv.markAcross(m)
	var x *xlinkAsk
	if lib.xlink && a.ledgers.holds(lib.pid) { // a link's connections are counted in the ledger
		x = &xlinkAsk{id: self.ID, pid: lib.pid}
	}
	d, fd := a.exchange(self, peer, k, lib, x)
	h := sockHalf(fd)
	if x != nil {
		h.name, h.token = x.name, x.token // 0 and nil unless the link came with host-tcp
	}
	a.rv.decideHalves(m, d, [2]half{h, noHalf})
	return a.rv.takeHalf(m, sideConnector)
}

// exchange offers k to the peer host's agent and returns its answer
// with, for host-tcp, a descriptor of the connection the answer came on,
// which goes to the connecting library's process, so it offers nothing
// while the fabric guard cannot hold that socket. x, if not nil, asks for
// a cross-host link and gets its name and token.
func (a *Agent) exchange(self, peer directory.Container, k tuple, lib asking, x *xlinkAsk) (decision, int) {
	if why := a.fabricRefusal(lib.pid); why != "" {
		return overlay(why), -1
	}
	return a.offerHost(connOffer(k, peer.Host, x, lib.mark))
}

// offerSpec is one offer to the agent of host: a message of type typ with
// attrs, to which offerOn adds HOST, NONCE, TIME and MAC; x, if not nil,
// asks for a cross-host link.
type offerSpec struct {
	typ   protocol.Type
	attrs []protocol.Attr
	host  string
	x     *xlinkAsk
}

// connOffer is the OFFER of connection k to a container on host; x, if
// not nil, asks for a cross-host link (CAPS bit 2); mark says the
// connecting library marks its SYNs (CAPS bit 3).
func connOffer(k tuple, host string, x *xlinkAsk, mark bool) offerSpec {
	o := offerSpec{typ: protocol.TypeOffer, host: host, x: x, attrs: []protocol.Attr{
		protocol.Endpoint(protocol.AttrLocalEndpoint, k.conn), protocol.Endpoint(protocol.AttrRemoteEndpoint, k.acc)}}
	var caps uint32
	if x != nil {
		caps |= protocol.CapXLink
	}
	if mark {
		caps |= protocol.CapSynMark
	}
	if caps != 0 {
		o.attrs = append(o.attrs, protocol.U32(protocol.AttrCaps, caps))
	}
	return o
}

// offerHost makes offer o to its host's agent, on a pooled connection or
// else a fresh one, within offerBudget, and returns the answer with, for
// host-tcp, a descriptor of the connection it came on (committed to).
func (a *Agent) offerHost(o offerSpec) (decision, int) {
	key := a.clusterKey()
	if key == nil {
		return overlay(reasonNoKey), -1
	}
	host, ok := a.hostRecord(o.host)
	if !ok {
		return overlay(reasonUnreachable), -1
	}
	deadline := time.Now().Add(offerBudget)
	if c := a.pool.take(host); c != nil {
		if d, fd, dead := a.offerOn(c, key, o, deadline, true); !dead {
			return d, fd
		}
		a.log.Debug("fast-path offer: the pooled connection was closed by the peer agent; dialing", "host", o.host)
	}
	c, err := a.dialBroker(host, deadline)
	if err != nil {
		a.log.Info("fast-path offer: peer agent unreachable", "host", o.host, "err", err)
		return overlay(reasonUnreachable), -1
	}
	d, fd, _ := a.offerOn(c, key, o, deadline, false)
	return d, fd
}

// offerOn offers o on c and takes the answer; it closes c. For a pooled
// connection that turns out dead before the peer said a word (it reset
// or closed it: a restarted agent), it reports dead, and the caller may
// offer again on a fresh connection: the peer never saw this offer.
func (a *Agent) offerOn(c *net.TCPConn, key []byte, o offerSpec, deadline time.Time, pooled bool) (d decision, fd int, dead bool) {
	defer c.Close()
	c.SetDeadline(deadline)
	nonce := newNonce()
	offer := protocol.New(o.typ, 1, append(o.attrs[:len(o.attrs):len(o.attrs)],
		protocol.String(protocol.AttrHost, a.cfg.Host), nonce, timeAttr(time.Now()))...)
	if err := sign(key, offer); err != nil {
		return overlay(reasonChannelFailed), -1, false
	}
	if err := writeFrame(c, offer); err != nil {
		if pooled {
			return overlay(reasonUnreachable), -1, true
		}
		a.log.Info("fast-path offer: send failed", "host", o.host, "err", err)
		return overlay(reasonUnreachable), -1, false
	}
	reply, err := readFrame(c)
	if err != nil {
		if pooled && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
			return overlay(reasonUnreachable), -1, true
		}
		a.log.Info("fast-path offer: no reply", "host", o.host, "err", err)
		return overlay(reasonUnreachable), -1, false
	}
	d, fd = a.takeReply(c, key, nonce.Value, reply, o.x)
	return d, fd, false
}

// takeReply checks the acceptor agent's reply and, for host-tcp, commits
// to it and returns a descriptor of c for the connecting library, keeping
// the cross-host link the reply grants to x.
func (a *Agent) takeReply(c *net.TCPConn, key, nonce []byte, reply *protocol.Message, x *xlinkAsk) (decision, int) {
	if err := checkReply(key, nonce, reply); err != nil {
		a.log.Warn("fast-path offer: reply refused", "peer", c.RemoteAddr().String(), "err", err)
		return overlay(reasonBadReply), -1
	}
	kind, _ := reply.Get(protocol.AttrPathKind)
	if kind[0] != pathHostTCP {
		reason, _ := reply.String(protocol.AttrReason)
		return overlay(reason), -1
	}
	fd, err := dupConn(c)
	if err != nil {
		a.log.Warn("fast-path offer: keep the connection", "err", err)
		return overlay(reasonChannelFailed), -1
	}
	if err := commit(c, key, nonce, reply.Seq); err != nil {
		a.log.Info("fast-path offer: COMMIT not sent within the budget", "peer", c.RemoteAddr().String(), "err", err)
		closeFD(fd)
		return overlay(reasonUnreachable), -1
	}
	if x != nil {
		a.recordXLink(x, c, reply)
	}
	return decision{kind: pathHostTCP}, fd
}

// commit sends the COMMIT that makes the acceptor's agent hand its end to
// the accepting library. c's deadline is the end of the budget: past it
// the write fails without sending a byte, and the caller's close tells the
// acceptor's agent to use the overlay.
func commit(c *net.TCPConn, key, nonce []byte, seq uint32) error {
	m, err := commitMessage(key, nonce, seq)
	if err != nil {
		return err
	}
	return writeFrame(c, m)
}

// checkReply accepts only a PATH signed with key that echoes our nonce.
func checkReply(key, nonce []byte, reply *protocol.Message) error {
	if e := reply.Err(); e != nil {
		return fmt.Errorf("the peer agent refused the offer: %w", e)
	}
	if reply.Type != protocol.TypePath {
		return fmt.Errorf("reply is %v, want PATH", reply.Type)
	}
	if err := verify(key, reply); err != nil {
		return err
	}
	if echo, _ := reply.Get(protocol.AttrNonce); !bytes.Equal(echo, nonce) {
		return errors.New("reply does not echo the offer's nonce")
	}
	if kind, ok := reply.Get(protocol.AttrPathKind); !ok || len(kind) != 1 {
		return errors.New("reply carries no PATH_KIND")
	}
	return nil
}

// dialBroker connects from this host's fabric address to the broker port
// of host h.
func (a *Agent) dialBroker(h directory.Host, deadline time.Time) (*net.TCPConn, error) {
	local, err := netip.ParseAddr(a.cfg.FabricIP)
	if err != nil {
		return nil, fmt.Errorf("this host's fabric IP %q: %w", a.cfg.FabricIP, err)
	}
	d := net.Dialer{Deadline: deadline, KeepAlive: -1, Control: fabricControl, LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(local, 0))}
	c, err := d.Dial("tcp", net.JoinHostPort(h.FabricIP, strconv.Itoa(a.cfg.BrokerPort)))
	if err != nil {
		return nil, err
	}
	tc := c.(*net.TCPConn)
	tc.SetNoDelay(false) // the kernel's default, as the application's own socket had; the library applies its options
	return tc, nil
}

// dupConn marks c's socket as a handed connection (markConnected: the
// library may disconnect it, but it can connect nowhere else) and returns
// a close-on-exec duplicate of it; the caller closes c, which leaves the
// socket open through the duplicate.
func dupConn(c *net.TCPConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, derr := -1, error(nil)
	if err := raw.Control(func(s uintptr) {
		if derr = markConnected(int(s)); derr == nil {
			fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0)
		}
	}); err != nil {
		return -1, err
	}
	return fd, derr
}

// hostRecord returns the directory record of host name.
func (a *Agent) hostRecord(name string) (directory.Host, bool) {
	for _, h := range a.dir.Hosts() {
		if h.Name == name {
			return h, true
		}
	}
	return directory.Host{}, false
}

// listenBroker opens the broker port on this host's fabric address. An
// agent that cannot still serves everything else: cross-host offers to it
// fail and fall back to the overlay (agent-unreachable), and STATUS says
// why.
func (a *Agent) listenBroker() {
	if a.cfg.FabricIP == "" {
		a.brokerErr = "no fabric IP configured; cross-host fast paths to this host use the overlay"
		return
	}
	addr := net.JoinHostPort(a.cfg.FabricIP, strconv.Itoa(a.cfg.BrokerPort))
	lc := net.ListenConfig{KeepAlive: -1, Control: fabricControl}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		a.brokerErr = fmt.Sprintf("listen on broker port %s: %v; cross-host fast paths to this host use the overlay", addr, err)
		a.log.Warn(a.brokerErr)
		return
	}
	a.broker = ln
}

func (a *Agent) brokerLoop(ctx context.Context, ln net.Listener) {
	defer a.wg.Done()
	slots := make(chan struct{}, maxOffersInFlight)
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			a.log.Warn("broker accept failed", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		select {
		case slots <- struct{}{}:
		default:
			a.log.Warn("too many fast-path offers in flight; refusing one", "from", c.RemoteAddr().String())
			c.Close()
			continue
		}
		a.wg.Add(1)
		go func() {
			var once sync.Once
			release := func() { once.Do(func() { <-slots }) }
			defer func() { release(); a.wg.Done() }()
			a.serveOffer(ctx, c.(*net.TCPConn), release)
		}()
	}
}
