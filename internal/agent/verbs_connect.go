package agent

import (
	"bytes"
	"net"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
	"github.com/freeflow-net/freeflow/internal/verbsid"
)

// verbsConnect connects the caller's QP to the one VERBS_PEER names, and
// hands over that QP's memfd and doorbell, or, on another host, the socket
// of a connection with it (verbs_xhost.go).
func (s *session) verbsConnect(m *protocol.Message) (*protocol.Message, error) {
	qpn, p, err := qpAndPeer(m)
	if err != nil {
		return nil, err
	}
	r := s.a.verbs
	r.mu.Lock()
	own, err := r.ownQPLocked(s, qpn)
	r.mu.Unlock()
	if err != nil { // only this session drops its QPs, and it is here
		return nil, err
	}
	peerC, err := s.verbsReachable(p)
	if err != nil {
		return nil, err
	}
	if peerC.Host != s.a.cfg.Host {
		return s.verbsConnectAcross(m, own, p, peerC)
	}
	peer, fds, err := r.connect(s, qpn, p.QPN, peerC)
	if err != nil {
		return nil, err
	}
	s.outFDs = fds
	return protocol.New(protocol.TypeVerbsPeerQP, m.Seq, protocol.U32(protocol.AttrQPN, peer.qpn),
		protocol.VerbsQP{Type: peer.typ}.Attr()), nil
}

// connect pairs the caller's QP qpn with QP peerQPN of container peerC and
// returns that QP and copies of its memfd and, if it has one, its doorbell.
func (r *verbsRegistry) connect(s *session, qpn, peerQPN uint32, peerC directory.Container) (*vqp, []int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	own, err := r.ownQPLocked(s, qpn)
	if err != nil {
		return nil, nil, err
	}
	peer := r.qps[peerQPN]
	if peer == nil || peer.container != peerC.ID {
		return nil, nil, protocol.Errorf(protocol.CodeNotFound,
			"container %s has no QP %#x (yet); ask again once its program has made it", peerC.Name, peerQPN)
	}
	if peer.typ != own.typ {
		return nil, nil, protocol.Errorf(protocol.CodeInvalid,
			"QP %#x is of type %d and QP %#x of type %d: only QPs of one type connect", qpn, own.typ, peerQPN, peer.typ)
	}
	// An RC QP takes packets from its own remote QP only: its ring goes
	// only to the QP its owner connected it to. Until that owner does,
	// the caller asks again (as a NIC retries), and is rung when it has.
	own.peer = peer
	r.resetPairLocked(own, remoteQP{})
	if peer.peer != own {
		return nil, nil, protocol.Errorf(protocol.CodeNotFound,
			"QP %#x of container %s is not connected to QP %#x (yet); ask again once its program has moved it to RTR", peerQPN, peerC.Name, qpn)
	}
	if peer.bell >= 0 {
		ring(peer.bell)
	}
	var fds []int
	for _, fd := range []int{peer.fd, peer.bell} {
		if fd < 0 {
			continue
		}
		nfd, err := dupFD(fd)
		if err != nil {
			protocol.CloseFDs(fds)
			return nil, nil, err
		}
		fds = append(fds, nfd)
	}
	return peer, fds, nil
}

// qpAndPeer returns a request's QPN, the caller's QP, and its VERBS_PEER,
// the QP it names.
func qpAndPeer(m *protocol.Message) (uint32, protocol.VerbsPeer, error) {
	qpn, err := m.U32(protocol.AttrQPN)
	if err != nil {
		return 0, protocol.VerbsPeer{}, err
	}
	p, err := m.VerbsPeer()
	return qpn, p, err
}

// verbsReachable returns the container whose port p names, if the tenant
// policy lets the caller's container reach it (DENIED otherwise, as a TCP
// connection would be).
func (s *session) verbsReachable(p protocol.VerbsPeer) (directory.Container, error) {
	c, err := s.a.verbsPeerContainer(p)
	if err != nil {
		return directory.Container{}, err
	}
	if ok, why := s.a.policy().Trust(s.self, c); !ok {
		return directory.Container{}, protocol.Errorf(protocol.CodeDenied,
			"container %s may not reach the queue pairs of container %s (%s): the tenant policy forbids it, as it would a TCP connection", s.self.Name, c.Name, why)
	}
	return c, nil
}

// verbsPeerContainer returns the container whose verbs port has the LID
// and GID p names (those it names: a zero LID or GID names nothing),
// derived from its address as the CLI derives its sysfs tree; one of this
// host if two match (LIDs are unique only if the per-host subnets are
// laid out as docs/VERBS.md says).
func (a *Agent) verbsPeerContainer(p protocol.VerbsPeer) (directory.Container, error) {
	byGID := p.GID != [16]byte{}
	if p.LID == 0 && !byGID {
		return directory.Container{}, protocol.Errorf(protocol.CodeInvalid, "VERBS_PEER names neither a LID nor a GID; give the remote port's LID or GID")
	}
	var found directory.Container
	for _, c := range a.dir.Containers() {
		lid, _, gid, err := verbsid.Identity(c.IP)
		if err != nil {
			continue // it has no verbs device
		}
		if (p.LID == 0 || p.LID == lid) && (!byGID || bytes.Equal(gid, p.GID[:])) {
			if c.Host == a.cfg.Host {
				return c, nil
			}
			if found.ID == "" {
				found = c
			}
		}
	}
	if found.ID == "" {
		return directory.Container{}, protocol.Errorf(protocol.CodeNotFound,
			"no container has LID %#x / GID %s (yet); ask again once it runs", p.LID, net.IP(p.GID[:]))
	}
	return found, nil
}
