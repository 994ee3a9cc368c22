package agent

// Design note: UD lanes (PROTOCOL.md, "Verbs", "UD lanes").
//
// A UD QP takes datagrams from any UD QP that may reach it, so its
// senders do not share its ring: each brings a lane of its own, a memfd of
// a QP's layout that it produces into and the receiver consumes. The
// agent introduces them and keeps, per receiving QP, its live lanes in id
// order (ids from 1, never reused: a receiver that has seen lane n knows
// every lane it has not seen is above it), and per sending QP its lanes by
// receiving QP (a second lane to the same QP replaces the first). The
// lane's memfd is a held file of the sender's container: the sender made
// it, and a sender that opens lanes to many QPs pays for them, not they.
//
// A lane from a UD QP on another host is a TCP connection instead, kept
// here only until its receiver takes it (verbs_udx.go).
//
// Who the sender is comes from the agent, never from the lane's bytes: the
// receiver takes a datagram's source QPN, LID and GID from VERBS_LANES.
//
// A lane dies with either end: its dead word is set (the receiver drains
// and unmaps it, the sender asks for a new one), the agent lets its file
// go, and the receiving QP's doorbell, if it lives and has one, is rung,
// so that a receiver asleep in ibv_get_cq_event lets go of the dead
// sender's ring now, not at its next wake-up. A lane whose sender dies
// before its receiver took it stays listed, dead, on a descriptor of its
// own (no container's held file: the sender's container is not charged
// for a receiver that does not take it), until the receiver takes it or
// dies, or a live sender needs its place: what the sender sent before it
// exited is delivered, as by a fabric (udaddy's server exits right after
// its replies). A lane's memfd must be a
// file its container's QPs, regions and lanes do not hold already: the
// agent marks it dead when the lane dies, which would mark the other user
// dead too.

import (
	"cmp"
	"maps"
	"math"
	"slices"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
	"github.com/freeflow-net/freeflow/internal/verbsid"
	"golang.org/x/sys/unix"
)

// MaxLanesPerQP is how many live lanes one UD QP may have, one per
// sending QP: other containers' QPs make them, and each is a ring the
// receiver maps and scans (ARCHITECTURE.md, "Limits", says why 1024).
const MaxLanesPerQP = 1024

// vlane is one sender's lane to a receiving UD QP.
type vlane struct {
	id       uint32
	from, to *vqp               // from nil: a QP on another host (verbs_udx.go)
	src      protocol.VerbsPeer // the sender as the receiver is told: QPN, LID, GID
	fd       int                // the memfd, held as a file of from's container; from another host, the socket, parked for to's container
	file     fileKey
	handed   bool // its receiver has its memfd (lanesOf)
	orphan   bool // its sender died before that: listed until taken, fd a descriptor of its own
}

// verbsUDLane gives the caller's UD QP a lane to the UD QP VERBS_PEER names.
func (s *session) verbsUDLane(m *protocol.Message) (*protocol.Message, error) {
	qpn, p, err := qpAndPeer(m)
	if err != nil {
		return nil, err
	}
	if len(s.inFDs) != 1 {
		return nil, protocol.Errorf(protocol.CodeInvalid, "VERBS_UD_LANE carries %d file descriptors; it carries the lane's memfd", len(s.inFDs))
	}
	r := s.a.verbs
	r.mu.Lock()
	_, err = r.ownUDQPLocked(s, qpn)
	r.mu.Unlock()
	if err != nil { // only this session drops its QPs, and it is here
		return nil, err
	}
	if err := checkQPMemfd(s.inFDs[0]); err != nil {
		return nil, err
	}
	src, err := laneSource(qpn, s.self.IP)
	if err != nil {
		return nil, err
	}
	toC, err := s.verbsReachable(p)
	if err != nil {
		return nil, err
	}
	if toC.Host != s.a.cfg.Host {
		return s.verbsUDLaneAcross(m, qpn, p, toC)
	}
	lane := &vlane{src: src}
	to, old, bell, err := r.addLane(s, lane, p.QPN, toC, s.inFDs[0])
	if err != nil {
		return nil, err
	}
	if old != nil {
		s.a.retireLanes([]*vlane{old}, true)
	}
	s.a.announceLane(to)
	if bell >= 0 {
		s.outFDs = []int{bell}
	}
	return protocol.New(protocol.TypeOK, m.Seq), nil
}

// announceLane tells the receiving QP to of its new lane: one more in its
// lanes word, then a ring of its doorbell if it lives and has one. It
// gives back the use of to's memfd its caller held for this: the word is
// written through a mapping, outside the registry's lock.
func (a *Agent) announceLane(to *vqp) {
	if err := addLanesWord(to.fd); err != nil {
		a.log.Warn("could not count a new lane in a UD QP's memfd; it finds the lane only when it asks for its lanes on its own",
			"qpn", to.qpn, "container", to.container, "err", err)
	}
	r := a.verbs
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.qps[to.qpn] == to && to.bell >= 0 {
		ring(to.bell)
	}
	r.releaseFilesLocked(to.container, []fileKey{to.file})
}

// laneSource names the sender's QP qpn of the container at ip as the
// receiver is told: its QPN, its port's LID and GID.
func laneSource(qpn uint32, ip string) (protocol.VerbsPeer, error) {
	lid, _, gid, err := verbsid.Identity(ip)
	if err != nil {
		return protocol.VerbsPeer{}, protocol.Errorf(protocol.CodeInvalid, "the caller's container has no verbs device: %v", err)
	}
	p := protocol.VerbsPeer{QPN: qpn, LID: lid}
	copy(p.GID[:], gid)
	return p, nil
}

// ownUDQPLocked returns the caller's live UD QP qpn, or INVALID.
func (r *verbsRegistry) ownUDQPLocked(s *session, qpn uint32) (*vqp, error) {
	qp, err := r.ownQPLocked(s, qpn)
	if err == nil && qp.typ != protocol.QPTypeUD {
		err = protocol.Errorf(protocol.CodeInvalid, "QP %#x is of type %d; lanes are a UD (4) QP's", qpn, qp.typ)
	}
	return qp, err
}

// addLane makes lane, from the caller's QP lane.src.QPN to QP toQPN of
// container toC, on the memfd fd, and returns the receiving QP (a use of
// its memfd held for announceLane), the lane it replaces if any (for the
// caller to retire) and a copy of the receiving QP's doorbell for the
// sender (-1: none).
func (r *verbsRegistry) addLane(s *session, lane *vlane, toQPN uint32, toC directory.Container, fd int) (*vqp, *vlane, int, error) {
	fdShare := r.fdShare()
	r.mu.Lock()
	defer r.mu.Unlock()
	from, err := r.ownUDQPLocked(s, lane.src.QPN)
	if err != nil {
		return nil, nil, -1, err
	}
	to := r.qps[toQPN]
	if to == nil || to.container != toC.ID {
		return nil, nil, -1, protocol.Errorf(protocol.CodeNotFound, "container %s has no QP %#x (a datagram to it is lost)", toC.Name, toQPN)
	}
	if to.typ != protocol.QPTypeUD {
		return nil, nil, -1, protocol.Errorf(protocol.CodeInvalid, "QP %#x is of type %d; a lane goes to a UD (4) QP", toQPN, to.typ)
	}
	old := from.sent[to]
	if old == nil && to.full() {
		return nil, nil, -1, protocol.Errorf(protocol.CodeLimit,
			"QP %#x has %d lanes, one per sender, its limit; a sender gets one once another's QP is destroyed", toQPN, MaxLanesPerQP)
	}
	if to.idsGiven() {
		return nil, nil, -1, protocol.Errorf(protocol.CodeLimit, "QP %#x has been given every lane id; its owner makes a new QP", toQPN)
	}
	k, err := fileKeyOf(fd)
	if err != nil {
		return nil, nil, -1, err
	}
	if r.files[from.container][k] != nil {
		return nil, nil, -1, protocol.Errorf(protocol.CodeInvalid,
			"the lane's memfd is one the container's QPs, regions or lanes hold already; a lane needs a memfd of its own (the agent marks it dead when the lane dies)")
	}
	if lane.fd, err = r.holdKeyLocked(from.container, k, fd, fdShare); err != nil {
		return nil, nil, -1, err
	}
	bell := -1
	if to.bell >= 0 {
		if bell, err = dupFD(to.bell); err != nil {
			r.releaseFilesLocked(from.container, []fileKey{k})
			return nil, nil, -1, err
		}
	}
	if old != nil {
		r.detachLaneLocked(old)
	} else {
		r.makeRoomLocked(to)
	}
	to.lastLane++
	lane.id, lane.from, lane.to, lane.file = to.lastLane, from, to, k
	to.lanes = append(to.lanes, lane) // ids only grow: still in order
	if from.sent == nil {
		from.sent = map[*vqp]*vlane{}
	}
	from.sent[to] = lane
	r.files[to.container][to.file].users++
	return to, old, bell, nil
}

// lanesHeld is how many lanes qp has, offers accepted from other hosts
// counted (verbs_udx.go).
func (qp *vqp) lanesHeld() int { return len(qp.lanes) + qp.xaccepting }

// full reports whether qp takes no more lanes, its orphans (design note)
// not counted: a live sender's lane goes before a dead one's datagrams.
func (qp *vqp) full() bool {
	return qp.lanesHeld()-qp.orphans() >= MaxLanesPerQP
}

func (qp *vqp) orphans() int {
	n := 0
	for _, l := range qp.lanes {
		if l.orphan {
			n++
		}
	}
	return n
}

// makeRoomLocked drops qp's oldest orphan if qp has no room for one more
// lane otherwise; the caller checked it is not full.
func (r *verbsRegistry) makeRoomLocked(qp *vqp) {
	if qp.lanesHeld() < MaxLanesPerQP {
		return
	}
	if i := slices.IndexFunc(qp.lanes, func(l *vlane) bool { return l.orphan }); i >= 0 {
		r.forgetLaneLocked(qp.lanes[i])
	}
}

// idsGiven reports whether qp has given every lane id, offers accepted
// from other hosts counted.
func (qp *vqp) idsGiven() bool { return qp.lastLane >= math.MaxUint32-uint32(qp.xaccepting) }

// detachLaneLocked removes lane from both its ends; the caller retires it.
func (r *verbsRegistry) detachLaneLocked(lane *vlane) {
	if lane.from != nil {
		delete(lane.from.sent, lane.to)
	} else {
		r.releaseParkedLocked(lane.to.container)
	}
	if i, ok := slices.BinarySearchFunc(lane.to.lanes, lane.id, func(l *vlane, id uint32) int { return cmp.Compare(l.id, id) }); ok {
		lane.to.lanes = slices.Delete(lane.to.lanes, i, i+1)
	}
}

// detachLanesLocked removes every lane qp sends or receives (once each: a
// QP may send to itself); the caller retires them. With keep (qp died),
// a lane qp sent that its receiver has not taken stays listed, an orphan
// (design note).
func (r *verbsRegistry) detachLanesLocked(qp *vqp, keep bool) []*vlane {
	lanes := slices.Collect(maps.Values(qp.sent))
	for _, l := range qp.lanes {
		if l.from != qp {
			lanes = append(lanes, l)
		}
	}
	var retire []*vlane
	for _, l := range lanes {
		if keep && l.from == qp && l.to != qp && !l.handed && r.orphanLocked(l) {
			continue
		}
		r.detachLaneLocked(l)
		retire = append(retire, l)
	}
	return retire
}

// orphanLocked keeps lane, whose sender died before its receiver took it,
// listed for the receiver (design note): dead, on a descriptor of its
// own, the sender's file given back, the receiver rung; false if it could
// not (no descriptor left): it dies as any lane.
func (r *verbsRegistry) orphanLocked(l *vlane) bool {
	fd, err := dupFD(l.fd)
	if err != nil {
		return false
	}
	// Failing, the receiver finds it live: it drains it all the same, and unmaps it when its QP goes.
	markQPDead(fd)
	delete(l.from.sent, l.to)
	r.releaseFilesLocked(l.from.container, []fileKey{l.file})
	l.fd, l.orphan = fd, true
	if r.qps[l.to.qpn] == l.to && l.to.bell >= 0 {
		ring(l.to.bell)
	}
	return true
}

// forgetLaneLocked forgets a lane the agent alone holds a descriptor of
// (an orphan, a lane from another host): taken, or its place needed.
func (r *verbsRegistry) forgetLaneLocked(l *vlane) {
	r.detachLaneLocked(l)
	closeFD(l.fd)
}

// retireLanes marks detached lanes dead (unless the agent is stopping:
// design note of verbs.go), rings each receiving QP that still lives and
// has a doorbell, and lets the lanes' memfds go; a lane from another host,
// not handed yet, is closed (its sender reads EOF).
func (a *Agent) retireLanes(lanes []*vlane, dead bool) {
	if len(lanes) == 0 {
		return
	}
	if dead {
		for _, l := range lanes {
			if l.from == nil || l.orphan { // a socket; dead already
				continue
			}
			if err := markQPDead(l.fd); err != nil {
				a.log.Warn("could not mark a UD lane's memfd dead; its receiver keeps it mapped until its QP goes",
					"lane", l.id, "qpn", l.to.qpn, "err", err)
			}
		}
	}
	r := a.verbs
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range lanes {
		if l.from == nil || l.orphan { // it dies with its receiver only: the agent's own descriptor
			closeFD(l.fd)
			continue
		}
		if dead && r.qps[l.to.qpn] == l.to && l.to.bell >= 0 {
			ring(l.to.bell)
		}
		r.releaseFilesLocked(l.from.container, []fileKey{l.file})
	}
}

// verbsUDLanes answers the caller's UD QP with its live lanes from lane id
// OFFSET on, at most protocol.MaxFDs, in id order, and their memfds.
func (s *session) verbsUDLanes(m *protocol.Message) (*protocol.Message, error) {
	qpn, err := m.U32(protocol.AttrQPN)
	if err != nil {
		return nil, err
	}
	first, err := m.U32(protocol.AttrOffset)
	if err != nil {
		return nil, err
	}
	entries, fds, err := s.a.verbs.lanesOf(s, qpn, first)
	if err != nil {
		return nil, err
	}
	reply := protocol.New(protocol.TypeOK, m.Seq)
	if len(entries) > 0 {
		reply.Attrs = append(reply.Attrs, protocol.Lanes(entries))
	}
	s.outFDs = fds
	return reply, nil
}

// lanesOf returns the live lanes to the caller's UD QP qpn from id first
// on, at most protocol.MaxFDs, and a read-write copy of each one's memfd:
// the receiver writes its consumer words there; or, for a lane from
// another host, of its socket, which the receiver holds from now on: the
// agent closes its own and forgets the lane.
func (r *verbsRegistry) lanesOf(s *session, qpn, first uint32) ([]protocol.Lane, []int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	to, err := r.ownUDQPLocked(s, qpn)
	if err != nil {
		return nil, nil, err
	}
	i, _ := slices.BinarySearchFunc(to.lanes, first, func(l *vlane, id uint32) int { return cmp.Compare(l.id, id) })
	var entries []protocol.Lane
	var fds []int
	for _, l := range to.lanes[i:min(len(to.lanes), i+protocol.MaxFDs)] {
		fd, err := dupFD(l.fd)
		if err != nil {
			protocol.CloseFDs(fds)
			return nil, nil, err
		}
		entries, fds = append(entries, protocol.Lane{ID: l.id, From: l.src}), append(fds, fd)
	}
	var gone []*vlane
	for _, l := range to.lanes[i : i+len(entries)] {
		l.handed = true
		if l.from == nil || l.orphan {
			gone = append(gone, l)
		}
	}
	for _, l := range gone {
		r.forgetLaneLocked(l) // the receiver holds its own descriptor now
	}
	return entries, fds, nil
}

// ring rings a doorbell: one byte, never blocking (a full doorbell holds a
// wake-up already).
func ring(bell int) {
	unix.Sendto(bell, []byte{1}, unix.MSG_DONTWAIT|unix.MSG_NOSIGNAL, nil)
}
