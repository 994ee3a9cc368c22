package agent

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
)

// serveOffer is the accepting side of a cross-host connection: one OFFER
// on a fresh TCP connection from another agent, one reply, and for
// host-tcp the connection itself goes to the accepting library.
func (a *Agent) serveOffer(c *net.TCPConn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(offerReadLimit))
	m, err := readFrame(c)
	if err != nil {
		a.log.Debug("fast-path offer unreadable; dropped", "from", c.RemoteAddr().String(), "err", err)
		return
	}
	k, sender, key, err := a.checkOffer(c, m)
	if err != nil {
		a.log.Warn("fast-path offer refused", "from", c.RemoteAddr().String(), "err", err)
		writeFrame(c, protocol.ErrorMessage(m.Seq, protocol.Errorf(protocol.CodeDenied, "%v", err)))
		return
	}
	nonce, _ := m.Get(protocol.AttrNonce)
	reply := func(d decision) error {
		r := protocol.New(protocol.TypePath, m.Seq, protocol.U8(protocol.AttrPathKind, d.kind))
		if d.kind == pathOverlay {
			r.Attrs = append(r.Attrs, protocol.String(protocol.AttrReason, d.reason))
		}
		r.Attrs = append(r.Attrs, protocol.Attr{Type: protocol.AttrNonce, Value: nonce})
		if err := sign(key, r); err != nil {
			return err
		}
		return writeFrame(c, r)
	}
	li, reason := a.offerPrecheck(k, sender)
	if reason != "" {
		d, _ := a.rv.decideNow(k, sideConnector, overlay(reason)) // only an acceptor takes a parked half
		reply(d)
		return
	}
	a.meetOffer(c, k, li, reply)
}

// checkOffer authenticates m and returns the tuple it offers, the sending
// host and the key. Nothing about an offer is used before this passes.
func (a *Agent) checkOffer(c *net.TCPConn, m *protocol.Message) (tuple, directory.Host, []byte, error) {
	if m.Type != protocol.TypeOffer {
		return tuple{}, directory.Host{}, nil, fmt.Errorf("%v on the broker port, which serves only OFFER", m.Type)
	}
	key := a.clusterKey()
	if key == nil {
		return tuple{}, directory.Host{}, nil, fmt.Errorf("this agent has no cluster key yet (directory unreachable)")
	}
	if err := verify(key, m); err != nil {
		return tuple{}, directory.Host{}, nil, err
	}
	now := time.Now()
	if err := checkTime(m, now); err != nil {
		return tuple{}, directory.Host{}, nil, err
	}
	nonce, _ := m.Get(protocol.AttrNonce)
	if !a.nonces.fresh(nonce, now) {
		return tuple{}, directory.Host{}, nil, fmt.Errorf("OFFER nonce seen before: a replay")
	}
	sender, err := a.offerSender(c, m)
	if err != nil {
		return tuple{}, directory.Host{}, nil, err
	}
	conn, err1 := m.Endpoint(protocol.AttrLocalEndpoint)
	acc, err2 := m.Endpoint(protocol.AttrRemoteEndpoint)
	if err1 != nil || err2 != nil {
		return tuple{}, directory.Host{}, nil, fmt.Errorf("OFFER lacks its endpoints")
	}
	return tuple{conn: unmapEP(conn), acc: unmapEP(acc)}, sender, key, nil
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
		return directory.Host{}, fmt.Errorf("OFFER says it is from host %q, but came from %s", name, from)
	}
	return h, nil
}

// offerPrecheck applies this agent's rules to an authenticated offer, from
// the view of the connecting side (the reason goes to its library). If
// they pass, it returns the listener the offer waits on.
func (a *Agent) offerPrecheck(k tuple, sender directory.Host) (*listenerInfo, string) {
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
	li := &listenerInfo{key: listenerKey{acc.ID, k.acc.Port()}}
	if li.pids = a.listeners.pids(li.key.id, li.key.port); len(li.pids) == 0 {
		return nil, reasonNoListener
	}
	return li, ""
}

// meetOffer plays the connecting side of k's meeting on this host. Once
// the local ACCEPT is there, or the meeting is parked (its acceptor's
// process waits in a CONNECT of its own), it writes the host-tcp reply and
// only then gives the accepting library the connection (at once, or when
// a parked half is claimed), so the application's first byte always
// follows the reply on the wire.
func (a *Agent) meetOffer(c *net.TCPConn, k tuple, li *listenerInfo, reply func(decision) error) {
	m, role := a.rv.join(k, sideConnector, li, nil)
	switch role {
	case roleDuplicate:
		reply(overlay(reasonDuplicate))
		return
	case roleDecided:
		reply(a.rv.decision(m))
		return
	case roleFirst:
		if a.rv.await(m, offerWait) == turnDecided {
			reply(a.rv.decision(m))
			return
		}
	}
	fd, err := dupConn(c)
	if err != nil {
		a.log.Warn("keep an offered connection; using the overlay", "err", err)
		a.rv.decide(m, overlay(reasonChannelFailed), [2]int{-1, -1})
		reply(overlay(reasonChannelFailed))
		return
	}
	c.SetNoDelay(false)
	if err := reply(decision{kind: pathHostTCP}); err != nil {
		a.log.Info("reply to a fast-path offer failed; using the overlay", "peer", c.RemoteAddr().String(), "err", err)
		closeFD(fd)
		a.rv.decide(m, overlay(reasonUnreachable), [2]int{-1, -1})
		return
	}
	a.rv.decide(m, decision{kind: pathHostTCP}, [2]int{-1, fd})
}

func unmapEP(ep netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ep.Addr().Unmap(), ep.Port())
}
