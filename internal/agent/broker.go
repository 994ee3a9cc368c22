package agent

// Design note: connection brokering (PROTOCOL.md, "Connection brokering";
// the reasoning at length in docs/BROKERING.md).
//
// Every established overlay TCP connection whose ends run the library is
// asked about twice: CONNECT by the connecting end, ACCEPT by the accepting
// end, both naming it by its overlay 4-tuple. The agent decides once per
// tuple and gives both ends the same answer; the table of meetings
// (rendezvous.go) is where the two asks meet, and a meeting is decided
// exactly once, under the table lock, waiting with no lock held.
//
//   - Overlay at once, with a reason, when a rule already says no (recorded
//     for the tuple, so the other end gets it too); otherwise the first ask
//     waits at most meetWait (45 ms) for the second: then both get the fast
//     path, or both overlay (peer-timeout).
//   - Same host: an shm channel (shm.go) or a socketpair (PATH unix), and
//     maybe a link over which the two libraries set up their next
//     connections alone, listing them in their ledgers (ledger.go).
//   - Slow acceptors (acceptq.go): past meetWait, a connector whose
//     connection the kernel still shows in the acceptor's accept queue
//     waits on, up to queuedWait (150 ms).
//   - Cross host (crosshost_*.go): the connector's agent OFFERs the
//     connection to the acceptor's agent, which proposes host-tcp; the
//     connector's agent COMMITs within its 150 ms budget, and only then do
//     both ends take the path.
//   - Simultaneous connects (parked.go): a meeting whose acceptor is itself
//     blocked in a CONNECT is parked, and its connector completes it alone.
//   - The windows where the two ends can disagree all need an agent or a
//     library to die or stall far beyond these bounds; in each, both ends
//     see their connection end (EOF or reset), so no application hangs.

import (
	"net/netip"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
)

// Path kinds (PATH_KIND).
const (
	pathOverlay uint8 = 0
	pathUnix    uint8 = 1
	pathHostTCP uint8 = 2
	pathShm     uint8 = 3
)

// Reasons for an overlay decision (REASON). Policy adds its own.
const (
	reasonNotContainer = "not-a-container"
	reasonPeerNoLib    = "peer-not-freeflow"
	reasonSelfNoLib    = "self-not-freeflow"
	// The accepting library's own: the connecting program has no library
	// (its SYN carries no mark), so nobody asked the agent.
	reasonNoLibrary  = "peer-no-library"
	reasonNoListener = "listener-not-freeflow"
	// The connecting library predates the SYN mark (CAPS bit 3) and every
	// listener's library asks only about marked SYNs: no ACCEPT will come.
	reasonOldLibrary    = "old-library"
	reasonTimeout       = "peer-timeout"
	reasonUnreachable   = "agent-unreachable"
	reasonNoKey         = "no-cluster-key"
	reasonBadReply      = "bad-offer-reply"
	reasonNoCommit      = "no-commit"
	reasonDuplicate     = "duplicate-request"
	reasonChannelFailed = "channel-failed"
	reasonAgentStuck    = "agent-error"
)

// pathName is how a path kind is shown in `freeflow conns`.
func pathName(kind uint8) string {
	switch kind {
	case pathUnix:
		return "unix"
	case pathHostTCP:
		return "host-tcp"
	case pathShm:
		return "shm"
	}
	return "overlay"
}

// decision is the answer for one connection.
type decision struct {
	kind   uint8
	reason string // why overlay, or for unix why not shm; "" otherwise
}

func overlay(reason string) decision { return decision{kind: pathOverlay, reason: reason} }

// handleBrokering answers LISTEN, UNLISTEN, CONNECT and ACCEPT, and applies
// CLOSED (a notification: nil reply).
func (s *session) handleBrokering(m *protocol.Message) (*protocol.Message, error) {
	if err := s.libraryRequest(m.Type); err != nil {
		return nil, err
	}
	local, err := s.localEndpoint(m)
	if err != nil {
		return nil, err
	}
	switch m.Type {
	case protocol.TypeListen:
		if err := s.a.listeners.add(s, s.self.ID, local.Port()); err != nil {
			return nil, err
		}
		return protocol.New(protocol.TypeOK, m.Seq), nil
	case protocol.TypeUnlisten:
		s.a.listeners.remove(s, s.self.ID, local.Port())
		return protocol.New(protocol.TypeOK, m.Seq), nil
	}
	remote, err := m.Endpoint(protocol.AttrRemoteEndpoint)
	if err != nil {
		return nil, err
	}
	remote = unmapEP(remote)
	if m.Type == protocol.TypeClosed { // a notification: no reply (session.notified)
		s.a.live.remove(s.self.ID, local, remote)
		return nil, nil
	}
	return s.broker(m, local, remote), nil
}

// libraryRequest refuses a message of type t unless it came on the library
// socket from a container that is still registered.
func (s *session) libraryRequest(t protocol.Type) error {
	if s.admin {
		return protocol.Errorf(protocol.CodeDenied, "%v is accepted only on the library socket", t)
	}
	return s.registered()
}

// registered refuses a library caller whose container has been
// unregistered since its HELLO.
func (s *session) registered() error {
	if !s.a.ids.has(s.self.ID) {
		return protocol.Errorf(protocol.CodeDenied, "container %s has been unregistered from host %s", s.self.ID, s.a.cfg.Host)
	}
	return nil
}

// localEndpoint returns LOCAL_EP, refusing an address that is not the
// caller's own: a container may speak only for its own connections. A
// listener may also be bound to the unspecified address.
func (s *session) localEndpoint(m *protocol.Message) (netip.AddrPort, error) {
	ep, err := m.Endpoint(protocol.AttrLocalEndpoint)
	if err != nil {
		return ep, err
	}
	ep = unmapEP(ep)
	listen := m.Type == protocol.TypeListen || m.Type == protocol.TypeUnlisten
	if ep.Addr().String() == s.self.IP || (listen && ep.Addr().IsUnspecified()) {
		return ep, nil
	}
	return ep, protocol.Errorf(protocol.CodeDenied, "%v names local address %s, but the caller is container %s with IP %s",
		m.Type, ep.Addr(), s.self.Name, s.self.IP)
}

// broker decides CONNECT or ACCEPT and returns the PATH reply; a fast
// path's descriptors are left in s.outFDs for the reply to carry.
func (s *session) broker(m *protocol.Message, local, remote netip.AddrPort) *protocol.Message {
	side, k := sideConnector, tuple{conn: local, acc: remote}
	if m.Type == protocol.TypeAccept {
		side, k = sideAcceptor, tuple{conn: remote, acc: local}
	}
	peer, d, h := s.a.decide(s, k, side)
	if d.reason != reasonDuplicate {
		s.a.live.add(s.self.ID, s.pid, local, remote, connInfo(s.self, peer, local, remote, d), h.charge)
	}
	reply := protocol.New(protocol.TypePath, m.Seq, protocol.U8(protocol.AttrPathKind, d.kind))
	if d.reason != "" {
		reply.Attrs = append(reply.Attrs, protocol.String(protocol.AttrReason, d.reason))
	}
	reply.Attrs = append(reply.Attrs, h.linkAttrs()...)
	s.outFDs = h.fds()
	return reply
}

// decide returns the peer's record (empty if none), the decision for k
// and, for a fast path, this side's half of the channel (noHalf otherwise).
func (a *Agent) decide(s *session, k tuple, side side) (directory.Container, decision, half) {
	peerEP := k.acc
	if side == sideAcceptor {
		peerEP = k.conn
	}
	lib := asking{shm: s.caps&protocol.CapShm != 0, link: s.caps&protocol.CapLink != 0, xlink: s.caps&protocol.CapXLink != 0,
		mark: s.caps&protocol.CapSynMark != 0, pid: s.pid}
	if side == sideAcceptor { // whatever the answer: links depend on who accepts (shm.go, linkListener)
		a.listeners.accepting(s.self.ID, k.acc.Port(), s.pid)
	}
	peer, li, reason := a.precheck(s.self, peerEP, side, lib.mark)
	if reason != "" {
		d, parked := a.rv.decideNow(k, side, overlay(reason))
		if parked != nil { // decided fast without us: take our half, as the connector has its own
			d, h := a.rv.takeHalf(parked, side)
			return peer, d, h
		}
		return peer, d, noHalf
	}
	c := &connector{pid: s.pid, mine: a.listeners.keysOf(s.pid, s.ns)}
	defer a.rv.endAsk(c, side, k)
	if side == sideAcceptor {
		finish := a.finishLocal
		if peer.Host != a.cfg.Host {
			finish = nil // the offer finishes the meeting
		}
		d, h := a.meet(k, side, nil, c, lib, finish)
		return peer, d, h
	}
	if peer.Host != a.cfg.Host {
		d, h := a.offerRemote(s.self, peer, k, c, lib)
		return peer, d, h
	}
	d, h := a.meet(k, side, li, c, lib, a.finishLocal)
	return peer, d, h
}

// precheck applies the rules that decide overlay at once, from this side's
// view; marks says the asking library marks its SYNs. It returns the
// peer's record, for a connector to a local container the listener it
// waits on, and the reason, or "" to go on.
func (a *Agent) precheck(self directory.Container, peerEP netip.AddrPort, side side, marks bool) (directory.Container, *listenerInfo, string) {
	peer, ok := a.dir.LookupIP(peerEP.Addr().String())
	switch {
	case !ok:
		return directory.Container{}, nil, reasonNotContainer
	case !self.FreeFlow:
		return peer, nil, reasonSelfNoLib
	case !peer.FreeFlow:
		return peer, nil, reasonPeerNoLib
	}
	if ok, why := a.policy().Trust(self, peer); !ok {
		return peer, nil, why
	}
	if side == sideConnector && peer.Host == a.cfg.Host {
		li, why := a.listeners.waitOn(peer.ID, peerEP.Port(), self.ID, marks)
		return peer, li, why
	}
	return peer, nil, ""
}

// connInfo describes one answered connection for `freeflow conns`.
func connInfo(self, peer directory.Container, local, remote netip.AddrPort, d decision) agentapi.ConnInfo {
	return agentapi.ConnInfo{
		Local: local.String(), Remote: remote.String(),
		LocalContainer: self.Name, RemoteContainer: peer.Name,
		Path: pathName(d.kind), Reason: d.reason,
	}
}
