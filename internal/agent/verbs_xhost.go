package agent

// Design note: verbs QPs across hosts (PROTOCOL.md, "Verbs", "Across
// hosts").
//
// Two RC QPs on two hosts talk over one TCP connection between the hosts'
// fabric addresses, made and handed as a host-tcp connection is (the
// signed exchange and COMMIT of crosshost_*.go, a marked socket, the
// fabric guard); the providers then use it directly, the agents are never
// on it. Each QP's VERBS_CONNECT names the other, and the connection must
// be made once, whichever asks first, also when both ask at once, though
// each asks again and again (NOTFOUND) until it has its end.
//
// So each agent keeps, per RC QP of its host, the remote QP its last
// VERBS_CONNECT named (want) and whether a connection with that QP is made
// (paired), its end parked until the QP's process asks again. A
// VERBS_CONNECT takes the parked end, or else offers (VERBS_OFFER) to the
// other host's agent, which accepts only for a QP of its host that wants
// the offering QP and is not paired: of two QPs the second to ask makes
// the connection, and the first finds its end parked (its doorbell rung).
// Two offers that cross (each QP wants the other, both offer) are told
// apart by a key both agents compute alike from the directory, the QP's
// container address and its QPN: the agent of the lower key refuses the
// offer of the higher, whose agent accepts the lower's, so exactly one
// connection is made. A QP whose accepted offer awaits its COMMIT neither
// offers nor accepts another. A QP whose offer was refused does not offer
// again for reofferAfter: the QP it wants offers once its program connects
// it, and a provider asks every millisecond. A parked socket counts as a
// file its QP's container holds (verbs_files.go): a program that never
// asks for its ends gets offers refused past that limit, not the agent's
// descriptors.
//
// No lock is held across the network: a VERBS_CONNECT marks its QP
// offering and offers unlocked (only its own session changes the QP
// meanwhile, and that session is here); an accepted offer marks its QP
// accepting with its generation, and parks the connection after the COMMIT
// only if the QP lives and its pairing has not been reset meanwhile.

import (
	"bytes"
	"net/netip"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/policy"
	"github.com/freeflow-net/freeflow/internal/protocol"
)

// reofferAfter is how long a QP whose offer was refused answers NOTFOUND
// without offering again.
const reofferAfter = 100 * time.Millisecond

// Reasons an agent refuses a VERBS_OFFER with (the REASON of its PATH
// overlay); the offering QP is told NOTFOUND: not yet.
const (
	reasonVerbsNoQP     = "verbs-no-such-qp"     // no QP of that number and type in that container (yet)
	reasonVerbsNotReady = "verbs-peer-not-ready" // it is not connected to the offering QP (yet)
	reasonVerbsPaired   = "verbs-peer-paired"    // its connection with the offering QP is made or being made
	reasonVerbsCrossing = "verbs-crossing-offer" // its own offer to the offering QP is the one taken
	reasonVerbsLimit    = "verbs-limit"          // its container holds as many files as it may, parked sockets counted
)

// remoteQP names a QP on another host: its container and number.
type remoteQP struct {
	c   directory.Container
	qpn uint32
}

// is reports whether w is QP qpn of container id.
func (w remoteQP) is(id string, qpn uint32) bool { return w.qpn != 0 && w.qpn == qpn && w.c.ID == id }

// xpair is an RC QP's pairing with a QP on another host. The registry's
// lock guards it.
type xpair struct {
	want      remoteQP  // the QP its last VERBS_CONNECT named; qpn 0: none, or one of this host
	gen       uint64    // changes whenever the pairing is reset: an acceptance of another gen is stale
	offering  bool      // an offer of ours for want is in flight
	accepting bool      // an offer from want's agent is accepted, its COMMIT awaited
	refused   time.Time // when an offer of ours for this gen was last refused
	paired    bool      // a connection with want is made: handed, or parked
	parked    int       // that connection's socket, not handed yet; -1: none
}

// resetPairLocked forgets qp's pairing, closing a parked socket, and sets
// its want.
func (r *verbsRegistry) resetPairLocked(qp *vqp, want remoteQP) {
	closeFD(r.unparkLocked(qp))
	qp.x = xpair{want: want, gen: qp.x.gen + 1, parked: -1}
}

// unparkLocked returns qp's parked socket, no longer parked nor counted
// (-1: none).
func (r *verbsRegistry) unparkLocked(qp *vqp) int {
	fd := qp.x.parked
	if fd >= 0 {
		qp.x.parked = -1
		r.releaseParkedLocked(qp.container)
	}
	return fd
}

// releaseParkedLocked counts one socket less parked for container id's
// QPs (its cross-host lanes not handed yet count too: verbs_udx.go).
func (r *verbsRegistry) releaseParkedLocked(id string) {
	if r.parked[id]--; r.parked[id] <= 0 {
		delete(r.parked, id)
	}
}

// pairKeyLess reports whether QP qa of the container at ipa comes before
// QP qb of the container at ipb: addresses compared as bytes, then QPNs.
func pairKeyLess(ipa string, qa uint32, ipb string, qb uint32) bool {
	pa, _ := netip.ParseAddr(ipa) // both of the directory, checked by verbsPeerContainer or LookupIP
	pb, _ := netip.ParseAddr(ipb)
	a, b := pa.As16(), pb.As16()
	if c := bytes.Compare(a[:], b[:]); c != 0 {
		return c < 0
	}
	return qa < qb
}

// verbsConnectAcross connects the caller's QP own to QP p.QPN of container
// peerC on another host: the socket of their connection, parked or made
// now by an offer to that host's agent.
func (s *session) verbsConnectAcross(m *protocol.Message, own *vqp, p protocol.VerbsPeer, peerC directory.Container) (*protocol.Message, error) {
	if own.typ != protocol.QPTypeRC {
		return nil, protocol.Errorf(protocol.CodeInvalid,
			"QP %#x is a UD QP and container %s runs on host %s: a UD QP reaches a QP on another host through a lane (VERBS_UD_LANE), not VERBS_CONNECT", own.qpn, peerC.Name, peerC.Host)
	}
	o, err := s.verbsOffer(protocol.TypeVerbsOffer, own.qpn, p, peerC)
	if err != nil {
		return nil, err
	}
	w := remoteQP{c: peerC, qpn: p.QPN}
	r := s.a.verbs
	fd, offer, err := r.wantAcross(own, w)
	if err != nil {
		return nil, err
	}
	if offer {
		d, ofd := s.a.offerHost(o)
		if fd, err = r.offered(own, w, d, ofd); err != nil {
			return nil, err
		}
	}
	s.outFDs = []int{fd}
	return protocol.New(protocol.TypeVerbsPeerQP, m.Seq, protocol.U32(protocol.AttrQPN, p.QPN),
		protocol.VerbsQP{Type: protocol.QPTypeRC}.Attr(), protocol.U8(protocol.AttrPathKind, pathHostTCP)), nil
}

// verbsOffer is the offer of type typ from the caller's QP qpn to QP
// p.QPN of container peerC on another host: DENIED if the caller's
// process may hold no fabric socket.
func (s *session) verbsOffer(typ protocol.Type, qpn uint32, p protocol.VerbsPeer, peerC directory.Container) (offerSpec, error) {
	if why := s.a.fabricRefusal(s.pid); why != "" {
		return offerSpec{}, protocol.Errorf(protocol.CodeDenied,
			"QP %#x would talk to container %s on host %s over a fabric socket, which this process may not hold (%s): the agent hands none without its fabric guard, nor to a process with CAP_NET_RAW or CAP_NET_ADMIN, which could clear its mark; run the program without them (docs/PROTOCOL.md, \"What a handed fabric socket can reach\")", qpn, peerC.Name, peerC.Host, why)
	}
	self, err := netip.ParseAddr(s.self.IP)
	if err != nil {
		return offerSpec{}, protocol.Errorf(protocol.CodeInternal, "the caller's container address %q: %v", s.self.IP, err)
	}
	return offerSpec{typ: typ, host: peerC.Host, attrs: []protocol.Attr{protocol.U32(protocol.AttrQPN, qpn), protocol.IP(self), p.Attr()}}, nil
}

// deniedOffer reports whether an offer was refused by the tenant policy
// or the fabric guard: DENIED to the caller, not "ask again".
func deniedOffer(reason string) bool {
	switch reason {
	case policy.ReasonTenantDiffers, policy.ReasonNoFastPath, reasonMayClearMark, reasonNoGuard:
		return true
	}
	return false
}

// wantAcross records that qp's VERBS_CONNECT names w and returns what it
// does next: hand the socket parked for it (fd), offer (offer; qp is marked
// offering), or neither (NOTFOUND: ask again).
func (r *verbsRegistry) wantAcross(qp *vqp, w remoteQP) (fd int, offer bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	qp.peer = nil
	x := &qp.x
	switch {
	case !x.want.is(w.c.ID, w.qpn):
		r.resetPairLocked(qp, w)
	case x.parked >= 0:
		return r.unparkLocked(qp), false, nil
	case x.accepting:
		return -1, false, notConnectedBack(qp, w, "its offer is being committed")
	case x.paired: // handed before: its program reset the QP and connects it again
		r.resetPairLocked(qp, w)
	case time.Since(x.refused) < reofferAfter:
		return -1, false, notConnectedBack(qp, w, "refused a moment ago")
	}
	x.offering = true
	return -1, true, nil
}

// offered ends qp's offer to w's agent with its answer d (fd: the
// connection, for host-tcp) and returns the socket to hand, or why there
// is none.
func (r *verbsRegistry) offered(qp *vqp, w remoteQP, d decision, fd int) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	x := &qp.x
	x.offering = false
	if d.kind == pathHostTCP {
		x.paired = true
		return fd, nil
	}
	if x.parked >= 0 { // w's crossing offer was accepted meanwhile
		return r.unparkLocked(qp), nil
	}
	switch d.reason {
	case reasonVerbsNoQP, reasonVerbsNotReady, reasonVerbsPaired, reasonVerbsCrossing:
		x.refused = time.Now()
		return -1, notConnectedBack(qp, w, d.reason)
	}
	if deniedOffer(d.reason) {
		return -1, protocol.Errorf(protocol.CodeDenied,
			"the agent of host %s refuses to connect QP %#x of container %s to QP %#x (%s): the tenant policy, or its fabric guard, forbids it", w.c.Host, w.qpn, w.c.Name, qp.qpn, d.reason)
	}
	// An agent unreachable or slow costs up to the offer's budget, and the
	// provider asks every millisecond with its context locked: not again
	// before reofferAfter either.
	x.refused = time.Now()
	return -1, protocol.Errorf(protocol.CodeNotFound,
		"the offer of QP %#x to QP %#x of container %s failed at the agent of host %s (%s); ask again", qp.qpn, w.qpn, w.c.Name, w.c.Host, d.reason)
}

func notConnectedBack(qp *vqp, w remoteQP, why string) error {
	return protocol.Errorf(protocol.CodeNotFound,
		"QP %#x of container %s on host %s is not connected to QP %#x (yet: %s); ask again once its program has moved it to RTR", w.qpn, w.c.Name, w.c.Host, qp.qpn, why)
}

// serveVerbsOffer answers an authenticated VERBS_OFFER from host sender:
// accepted, the connection it came on goes to the named QP of this host
// once the COMMIT is there, parked until its process asks. An error
// refuses it (ERROR DENIED).
func (a *Agent) serveVerbsOffer(p *offerPeer, m *protocol.Message, sender directory.Host) error {
	qpn, ip, to, err := verbsOfferAttrs(m)
	if err != nil {
		return err
	}
	qp, gen, reason := a.admitVerbsOffer(sender, ip, qpn, to)
	if reason != "" {
		p.reply(overlay(reason))
		return nil
	}
	fd, _ := a.acceptCommitted(p)
	a.verbs.park(qp, gen, fd)
	return nil
}

// verbsOfferAttrs returns what a VERBS_OFFER or VERBS_UD_OFFER names: the
// offering QP, its container's address, and the QP it offers to.
func verbsOfferAttrs(m *protocol.Message) (uint32, netip.Addr, protocol.VerbsPeer, error) {
	qpn, err1 := m.U32(protocol.AttrQPN)
	ip, err2 := m.IP()
	to, err3 := m.VerbsPeer()
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, netip.Addr{}, protocol.VerbsPeer{}, protocol.Errorf(protocol.CodeInvalid, "%v lacks its QPN, IP or VERBS_PEER", m.Type)
	}
	return qpn, ip, to, nil
}

// offeredQP applies the rules every verbs offer meets, from a QP of the
// container at ip, which must be a container of host sender, to the QP of
// type typ of this host that to names: the tenant policy, and a process
// that may hold a fabric socket. It returns the two containers and that
// QP, or why not.
func (a *Agent) offeredQP(sender directory.Host, ip netip.Addr, to protocol.VerbsPeer, typ uint32) (from, toC directory.Container, qp *vqp, why string) {
	from, ok := a.dir.LookupIP(ip.Unmap().String())
	if !ok || from.Host != sender.Name {
		return from, toC, nil, reasonNotContainer
	}
	toC, err := a.verbsPeerContainer(to)
	if err != nil || toC.Host != a.cfg.Host {
		return from, toC, nil, reasonNotContainer
	}
	if ok, why := a.policy().Trust(toC, from); !ok {
		return from, toC, nil, why
	}
	r := a.verbs
	r.mu.Lock()
	qp = r.qps[to.QPN]
	r.mu.Unlock()
	if qp == nil || qp.container != toC.ID || qp.typ != typ {
		return from, toC, nil, reasonVerbsNoQP
	}
	return from, toC, qp, a.fabricRefusal(qp.owner.pid)
}

// admitVerbsOffer applies this agent's rules to an offer from QP qpn of
// the container at ip, a container of host sender, to the RC QP of this
// host that to names, and marks that QP accepting; or returns why not.
func (a *Agent) admitVerbsOffer(sender directory.Host, ip netip.Addr, qpn uint32, to protocol.VerbsPeer) (*vqp, uint64, string) {
	from, toC, qp, why := a.offeredQP(sender, ip, to, protocol.QPTypeRC)
	if why != "" {
		return nil, 0, why
	}
	r := a.verbs
	gen, why := r.accept(qp, remoteQP{c: from, qpn: qpn}, pairKeyLess(toC.IP, qp.qpn, from.IP, qpn), r.fdShare())
	return qp, gen, why
}

// accept marks qp accepting an offer from QP from, unless it does not
// want that QP, has a connection with it made or being made, or offers to
// it itself and comes first (lower, pairKeyLess): then its own offer is
// the one the other agent accepts; or unless its container holds limit
// files already, parked sockets counted as held files (verbs_files.go):
// parked, the connection waits for its process to ask, which a hostile
// one never does. It returns qp's generation.
func (r *verbsRegistry) accept(qp *vqp, from remoteQP, lower bool, limit int) (uint64, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	x := &qp.x
	switch {
	case r.qps[qp.qpn] != qp:
		return 0, reasonVerbsNoQP
	case !x.want.is(from.c.ID, from.qpn):
		return 0, reasonVerbsNotReady
	case x.paired || x.accepting:
		return 0, reasonVerbsPaired
	case x.offering && lower:
		return 0, reasonVerbsCrossing
	case len(r.files[qp.container])+r.parked[qp.container] >= limit:
		return 0, reasonVerbsLimit
	}
	x.accepting = true
	return x.gen, ""
}

// park ends qp's acceptance of generation gen: the committed connection fd
// (-1: none came) is parked for qp's process, whose doorbell is rung, if
// qp lives and its pairing was not reset meanwhile; closed otherwise.
func (r *verbsRegistry) park(qp *vqp, gen uint64, fd int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.qps[qp.qpn] != qp || qp.x.gen != gen {
		closeFD(fd)
		return
	}
	qp.x.accepting = false
	if fd < 0 {
		return
	}
	qp.x.paired, qp.x.parked = true, fd
	r.parked[qp.container]++
	if qp.bell >= 0 {
		ring(qp.bell)
	}
}
