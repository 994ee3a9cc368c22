package agent

// Design note: UD lanes across hosts (PROTOCOL.md, "Verbs", "UD lanes").
//
// A sender's lane to a UD QP on another host is a TCP connection between
// the hosts' fabric addresses instead of a memfd, made and handed as an RC
// pair's is (verbs_xhost.go): the sender's agent offers it to the
// receiver's (VERBS_UD_OFFER on the broker port, signed, then COMMIT, a
// marked socket, the fabric guard, the tenant policy) and hands the
// sender its end at once. No pairing: a lane goes one way, and every
// offer is a new lane, so a sender whose socket fails simply asks again.
//
// The receiver's agent keeps its end as a lane of the receiving QP (an id
// of its own, the sender as the directory names it: never from the
// stream), counts it in the QP's lanes word and rings its doorbell, as
// for a lane on this host, and hands it with VERBS_UD_LANES. From then on
// the receiver holds it: the agent closes its copy and forgets the lane,
// which ends when either end closes. A socket not handed yet is parked for
// the receiving QP's container, counted with its files as an RC QP's
// parked end is (verbs_files.go), and closed with the QP; accepted offers
// awaiting their COMMIT count already, in the container's parked sockets
// and in the QP's lanes, so offers at once cannot pass either limit. The
// sender's agent keeps nothing: it holds neither the request's memfd nor
// the socket it hands.

import (
	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
)

// reasonVerbsLaneLimit refuses a VERBS_UD_OFFER to a QP at its lanes'
// limit (MaxLanesPerQP live, or every id given); the sender is told LIMIT,
// as it is by reasonVerbsLimit.
const reasonVerbsLaneLimit = "verbs-lane-limit"

// verbsUDLaneAcross gives the caller's UD QP qpn a lane to QP p.QPN of
// container toC on another host: one end of a new TCP connection with that
// host, the other end the receiver's lane.
func (s *session) verbsUDLaneAcross(m *protocol.Message, qpn uint32, p protocol.VerbsPeer, toC directory.Container) (*protocol.Message, error) {
	o, err := s.verbsOffer(protocol.TypeVerbsUDOffer, qpn, p, toC)
	if err != nil {
		return nil, err
	}
	d, fd := s.a.offerHost(o)
	if d.kind != pathHostTCP {
		return nil, laneRefused(d.reason, qpn, p, toC)
	}
	s.outFDs = []int{fd}
	return protocol.New(protocol.TypeOK, m.Seq, protocol.U8(protocol.AttrPathKind, pathHostTCP)), nil
}

// laneRefused is the caller's error when the agent of toC's host refused
// its QP qpn a lane to QP p.QPN with reason.
func laneRefused(reason string, qpn uint32, p protocol.VerbsPeer, toC directory.Container) error {
	switch {
	case deniedOffer(reason):
		return protocol.Errorf(protocol.CodeDenied,
			"the agent of host %s refuses a lane from QP %#x to QP %#x of container %s (%s): the tenant policy, or its fabric guard, forbids it", toC.Host, qpn, p.QPN, toC.Name, reason)
	case reason == reasonVerbsLaneLimit || reason == reasonVerbsLimit:
		return protocol.Errorf(protocol.CodeLimit,
			"QP %#x of container %s on host %s takes no more lanes now (%s); a datagram to it is lost until its program takes the lanes it has or one ends", p.QPN, toC.Name, toC.Host, reason)
	}
	return protocol.Errorf(protocol.CodeNotFound,
		"no lane from QP %#x to QP %#x of container %s on host %s (%s): a datagram to it is lost; ask again", qpn, p.QPN, toC.Name, toC.Host, reason)
}

// serveVerbsUDOffer answers an authenticated VERBS_UD_OFFER from host
// sender: accepted, the connection it came on becomes a lane of the named
// UD QP of this host once the COMMIT is there. An error refuses it (ERROR
// DENIED).
func (a *Agent) serveVerbsUDOffer(p *offerPeer, m *protocol.Message, sender directory.Host) error {
	qpn, ip, to, err := verbsOfferAttrs(m)
	if err != nil {
		return err
	}
	from, _, qp, why := a.offeredQP(sender, ip, to, protocol.QPTypeUD)
	var src protocol.VerbsPeer
	if why == "" {
		if src, err = laneSource(qpn, from.IP); err != nil {
			why = reasonNotContainer // a container without a verbs device has no QP
		}
	}
	if why == "" {
		why = a.verbs.reserveXLane(qp, a.verbs.fdShare())
	}
	if why != "" {
		p.reply(overlay(why))
		return nil
	}
	fd, _ := a.acceptCommitted(p)
	if a.verbs.addXLane(qp, &vlane{src: src}, fd) {
		a.announceLane(qp)
	}
	return nil
}

// reserveXLane counts a lane from another host to qp, accepted and not
// committed yet, among qp's lanes and its container's parked sockets
// (limit: the files the container may hold); or returns why not.
func (r *verbsRegistry) reserveXLane(qp *vqp, limit int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.qps[qp.qpn] != qp:
		return reasonVerbsNoQP
	case qp.idsGiven(), qp.full():
		return reasonVerbsLaneLimit
	case len(r.files[qp.container])+r.parked[qp.container] >= limit:
		return reasonVerbsLimit
	}
	qp.xaccepting++
	r.parked[qp.container]++
	return ""
}

// addXLane ends the acceptance reserveXLane counted: the committed
// connection fd (-1: none came) becomes lane, to QP to, if to lives; it is
// closed otherwise. It reports whether the lane was added, with a use of
// to's memfd held for announceLane.
func (r *verbsRegistry) addXLane(to *vqp, lane *vlane, fd int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	to.xaccepting--
	if fd < 0 || r.qps[to.qpn] != to {
		r.releaseParkedLocked(to.container)
		closeFD(fd)
		return false
	}
	r.makeRoomLocked(to)
	to.lastLane++
	lane.id, lane.to, lane.fd = to.lastLane, to, fd
	to.lanes = append(to.lanes, lane) // ids only grow: still in order
	r.files[to.container][to.file].users++
	return true
}
