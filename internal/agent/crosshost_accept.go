package agent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
)

// serveOffer is the accepting side of a cross-host exchange: one OFFER
// (a TCP connection), VERBS_OFFER (a pair of verbs QPs: verbs_xhost.go)
// or VERBS_UD_OFFER (a UD lane: verbs_udx.go) on a TCP connection from another agent, fresh or pooled (a HELLO first,
// see crosshost_pool.go), one reply, and for host-tcp, once the
// connector's agent has sent its COMMIT, the connection itself goes to
// the accepting process. release ends the connection's count among the
// offers in flight.
func (a *Agent) serveOffer(ctx context.Context, c *net.TCPConn, release func()) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(offerReadLimit))
	m, err := readFrame(c)
	if err == nil && m.Type == protocol.TypeHello {
		m, err = a.standby(ctx, c, m, release)
	}
	if err != nil {
		a.log.Debug("no fast-path offer on a broker connection; dropped", "from", c.RemoteAddr().String(), "err", err)
		return
	}
	want, serve := protocol.TypeOffer, a.serveConnOffer
	switch m.Type {
	case protocol.TypeVerbsOffer:
		want, serve = protocol.TypeVerbsOffer, a.serveVerbsOffer
	case protocol.TypeVerbsUDOffer:
		want, serve = protocol.TypeVerbsUDOffer, a.serveVerbsUDOffer
	}
	sender, key, err := a.checkSigned(c, m, want)
	if err == nil {
		nonce, _ := m.Get(protocol.AttrNonce)
		err = serve(&offerPeer{c: c, key: key, seq: m.Seq, nonce: nonce}, m, sender)
	}
	if err != nil {
		a.log.Warn("fast-path offer refused", "from", c.RemoteAddr().String(), "err", err)
		writeFrame(c, protocol.ErrorMessage(m.Seq, protocol.Errorf(protocol.CodeDenied, "%v", err)))
	}
}

// serveConnOffer answers an authenticated OFFER of a TCP connection from
// host sender; an error refuses it (ERROR DENIED).
func (a *Agent) serveConnOffer(p *offerPeer, m *protocol.Message, sender directory.Host) error {
	conn, err1 := m.Endpoint(protocol.AttrLocalEndpoint)
	acc, err2 := m.Endpoint(protocol.AttrRemoteEndpoint)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("OFFER lacks its endpoints")
	}
	k := tuple{conn: unmapEP(conn), acc: unmapEP(acc)}
	caps, _ := m.U32(protocol.AttrCaps)
	p.xlink = caps&protocol.CapXLink != 0
	li, reason := a.offerPrecheck(k, sender, caps&protocol.CapSynMark != 0)
	if reason != "" {
		d, _ := a.rv.decideNow(k, sideConnector, overlay(reason)) // only an acceptor takes a parked half
		p.reply(d)
		return nil
	}
	a.meetOffer(p, k, li)
	return nil
}

// offerPeer is the acceptor's end of one authenticated offer exchange.
type offerPeer struct {
	c     *net.TCPConn
	key   []byte
	seq   uint32
	nonce []byte // the offer's; its reply and COMMIT carry it
	xlink bool   // the OFFER said CAPS bit 2: the connecting library takes a cross-host link
}

// reply writes the signed PATH answering the offer, with link, the
// attributes of a cross-host link it grants.
func (p *offerPeer) reply(d decision, link ...protocol.Attr) error {
	r := protocol.New(protocol.TypePath, p.seq, protocol.U8(protocol.AttrPathKind, d.kind))
	if d.kind == pathOverlay {
		r.Attrs = append(r.Attrs, protocol.String(protocol.AttrReason, d.reason))
	}
	r.Attrs = append(r.Attrs, link...)
	r.Attrs = append(r.Attrs, protocol.Attr{Type: protocol.AttrNonce, Value: p.nonce})
	if err := sign(p.key, r); err != nil {
		return err
	}
	return writeFrame(p.c, r)
}

// awaitCommit reads exactly one message within wait and checks it is the
// COMMIT of this offer; the bytes after it are the application's.
func (p *offerPeer) awaitCommit(wait time.Duration) error {
	p.c.SetReadDeadline(time.Now().Add(wait))
	m, err := readFrame(p.c)
	if err != nil {
		return fmt.Errorf("no COMMIT within %v: %w", wait, err)
	}
	return checkCommit(p.key, p.nonce, m)
}

// checkSigned authenticates m, which must be of type want, as sent by
// another agent of the cluster: its MAC under the cluster key, its TIME,
// a nonce not seen before, and the sending host. It returns that host and
// the key.
func (a *Agent) checkSigned(c *net.TCPConn, m *protocol.Message, want protocol.Type) (directory.Host, []byte, error) {
	if m.Type != want {
		return directory.Host{}, nil, fmt.Errorf("%v on the broker port here, which takes only %v", m.Type, want)
	}
	key := a.clusterKey()
	if key == nil {
		return directory.Host{}, nil, fmt.Errorf("this agent has no cluster key yet (directory unreachable)")
	}
	if err := verify(key, m); err != nil {
		return directory.Host{}, nil, err
	}
	now := time.Now()
	if err := checkTime(m, now); err != nil {
		return directory.Host{}, nil, err
	}
	nonce, _ := m.Get(protocol.AttrNonce)
	if !a.nonces.fresh(nonce, now) {
		return directory.Host{}, nil, fmt.Errorf("%v nonce seen before: a replay", m.Type)
	}
	sender, err := a.offerSender(c, m)
	if err != nil {
		return directory.Host{}, nil, err
	}
	return sender, key, nil
}

// offerSender returns the host the offer names, which must be the host
// whose fabric address it came from: one agent cannot speak for another.
func (a *Agent) offerSender(c *net.TCPConn, m *protocol.Message) (directory.Host, error) {
	name, err := m.String(protocol.AttrHost)
	if err != nil {
		return directory.Host{}, err
	}
	h, ok := a.hostRecord(name)
	from := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	if !ok || h.FabricIP != from.String() {
		return directory.Host{}, fmt.Errorf("%v says it is from host %q, but came from %s", m.Type, name, from)
	}
	return h, nil
}

// offerPrecheck applies this agent's rules to an authenticated offer, from
// the view of the connecting side (the reason goes to its library). If
// they pass, it returns the listener the offer waits on.
func (a *Agent) offerPrecheck(k tuple, sender directory.Host, marks bool) (*listenerInfo, string) {
	if a.guardErr != "" {
		return nil, reasonNoGuard
	}
	conn, okc := a.dir.LookupIP(k.conn.Addr().String())
	acc, oka := a.dir.LookupIP(k.acc.Addr().String())
	switch {
	case !okc || conn.Host != sender.Name || !oka || acc.Host != a.cfg.Host:
		return nil, reasonNotContainer
	case !conn.FreeFlow:
		return nil, reasonSelfNoLib
	case !acc.FreeFlow:
		return nil, reasonPeerNoLib
	}
	if ok, why := a.policy().Trust(conn, acc); !ok {
		return nil, why
	}
	return a.listeners.waitOn(acc.ID, k.acc.Port(), conn.ID, marks)
}

// meetOffer plays the connecting side of k's meeting on this host. Once
// the local ACCEPT is there (within offerWait, or offerQueuedWait while
// the connection is still in the accept queue: acceptq.go), or the
// meeting is parked (its acceptor's process waits in a CONNECT of its
// own), it completes the meeting with
// commitOffer: the accepting library gets the connection (at once, or
// when a parked half is claimed) only after the connector's agent has
// committed to it, and always after the reply on the wire; with a
// cross-host link when the rules for one hold (crosshost_link.go). Unless the
// accepting process could clear the mark of the connection: then both ends
// take the overlay, the connector's through the reply.
func (a *Agent) meetOffer(p *offerPeer, k tuple, li *listenerInfo) {
	until := time.Now().Add(offerQueuedWait)
	m, role := a.rv.join(k, sideConnector, li, nil, asking{})
	switch role {
	case roleDuplicate:
		p.reply(overlay(reasonDuplicate))
		return
	case roleDecided:
		p.reply(a.rv.decision(m))
		return
	case roleFirst:
		if a.awaitAccept(m, offerWait, li, until) == turnDecided {
			p.reply(a.rv.decision(m))
			return
		}
	}
	if why := a.acceptorRefusal(m, li); why != "" {
		a.rv.decideHalves(m, overlay(why), noHalves)
		p.reply(overlay(why))
		return
	}
	d, h := a.commitOffer(p, a.grantXLink(p, m, li.key))
	a.rv.decideHalves(m, d, [2]half{noHalf, h})
}

// commitOffer writes the host-tcp reply, granting link g if not nil, and
// waits for the connector's agent to COMMIT it (acceptCommitted). It
// returns host-tcp with the accepting library's half: the connection, and
// g's listener; or overlay, g closed.
func (a *Agent) commitOffer(p *offerPeer, g *xlinkGrant) (decision, half) {
	h := g.half()
	fd, why := a.acceptCommitted(p, g.attrs()...)
	if why != "" {
		h.close()
		return overlay(why), noHalf
	}
	h.fd = fd
	return decision{kind: pathHostTCP}, h
}

// acceptCommitted writes the host-tcp reply to p's offer, with the
// attributes link, and waits for the offering agent to COMMIT it. It
// returns a descriptor of the connection (marked: dupConn) for the
// accepting process; or the overlay reason, if the connection cannot be
// kept, the reply cannot be written, or no valid COMMIT comes within the
// bound: the offering agent passed its budget (and then closes the
// connection without a word), died, or is not who it claims.
func (a *Agent) acceptCommitted(p *offerPeer, link ...protocol.Attr) (int, string) {
	fd, err := dupConn(p.c)
	if err != nil {
		a.log.Warn("keep an offered connection", "err", err)
		p.reply(overlay(reasonChannelFailed))
		return -1, reasonChannelFailed
	}
	p.c.SetNoDelay(false)
	if err := p.reply(decision{kind: pathHostTCP}, link...); err != nil {
		a.log.Info("reply to a fast-path offer failed", "peer", p.c.RemoteAddr().String(), "err", err)
		closeFD(fd)
		return -1, reasonUnreachable
	}
	if err := p.awaitCommit(a.cfg.commitWait); err != nil {
		a.log.Info("fast path not committed by the offering agent", "peer", p.c.RemoteAddr().String(), "err", err)
		closeFD(fd)
		return -1, reasonNoCommit
	}
	quickAck(p.c)
	return fd, ""
}

func unmapEP(ep netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ep.Addr().Unmap(), ep.Port())
}

// quickAck acknowledges what c received at once. COMMIT is the last
// agent byte on the connection and nothing answers it, so its ACK would
// wait for the delayed-ACK timer; meanwhile the connecting application's
// first small write, with Nagle on as on its own socket, would wait for
// that ACK: a 40 ms stall on new connections.
func quickAck(c *net.TCPConn) {
	if rc, err := c.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1)
		})
	}
}
