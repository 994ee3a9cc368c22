package agent

// Design note: connection brokering (PROTOCOL.md, "Connection brokering").
//
// Every established overlay TCP connection whose ends run the library is
// asked about twice: CONNECT by the connecting end, ACCEPT by the accepting
// end, both naming it by its overlay 4-tuple. The agent decides once per
// tuple (connector ip:port -> acceptor ip:port) and gives both ends the
// same answer; the table of meetings (rendezvous.go) is where the two asks
// meet.
//
// Overlay at once, with a reason, when a rule already says no: the peer is
// no registered container (not-a-container), runs without the library
// (peer-not-freeflow), policy refuses (tenant-differs, no-fast-path), or,
// on the connecting side, no library-enabled process listens on the peer's
// port (listener-not-freeflow). That answer is recorded for the tuple, so
// the other end, whether it already waits or asks later, gets it at once.
// Otherwise the first ask waits at most 45 ms (meetWait) for the second;
// then both get the fast path, or, on timeout, both get overlay
// (peer-timeout), unless the meeting is parked (below) or a slow
// acceptor is waited for (below). A decided tuple is remembered for a few
// seconds, so a late ask gets the recorded decision, or its parked half.
// Waiting happens in the asking connection's goroutine with no table lock
// held; a meeting is decided exactly once, under the table lock.
//
// Same host: the second ask creates the channel and each end gets one
// half: an shm channel (shm.go) in PATH shm, or, when either end cannot
// take one, socketpair(AF_UNIX, SOCK_STREAM) in PATH unix, with the reason
// why not shm; the agent closes its copies.
//
// Links (shm.go has the rules for granting one and the budget). Two round
// trips to the agent on every same-host connection's critical path limit
// the setup rate (2.4k conn/s against 9.5k on the bridge overlay), so with
// an shm channel the agent may also hand the two processes a link, a
// SOCK_SEQPACKET socketpair (PATH shm, third fd, LINK_TTL). Over it the
// connecting library offers its next connections to the same listener
// itself (a memfd and bell pair it made, LINK_OFFER, sent before its SYN),
// and the accepting library takes or refuses each by a compare-and-swap
// in the memfd header, so exactly one decision wins; a connector whose
// offer is not taken within 5 ms withdraws it and asks the agent as
// before, which is why meetWait is 45 ms: a peer that never answers still
// costs 50 ms at most. The agent hears of no connection decided over a
// link: each process lists its linked connections in its ledger, a memfd
// the agent maps and reads when it lists or counts (ledger.go).
//
// Slow acceptors (acceptq.go). A server whose accept() comes more than
// 45 ms after the handshake (a busy event loop, a sleep between accepts)
// has not had the chance to ask: its ACCEPT follows its accept(). So a
// same-host connector whose meetWait passes looks at the acceptor's end
// of the connection in the kernel (an exact 4-tuple inet_diag lookup in
// the acceptor container's namespace, on a NETLINK_SOCK_DIAG socket made
// there once and kept while the container is registered): while it is
// still in the accept queue (established, no inode: no process holds it)
// the connector waits on, looking again every 10 ms (queuedCheck), up to
// 150 ms from its CONNECT (queuedWait: the library gives up at 250 ms,
// and an answer it no longer waits for would leave the ends on different
// paths). Accepted, its ACCEPT, sent right after accept() returns (maybe
// after opening a session), gets up to acceptedLooks (3) looks' time to
// arrive; accepted with no ACCEPT, gone, or not readable: peer-timeout at
// once, so only an acceptor that has not yet accepted costs a connector
// more than meetWait and three looks. A reply not from the kernel is
// ignored; a container whose socket cannot be made is tried again (and
// logged) once a second at most. The
// lookups run in the connector's goroutine, no table lock held, each
// bounded (5 ms); one container's connectors wait so at most 64 at a
// time (queuedPerContainer). A meeting parked meanwhile (below) wakes the
// wait as always. Across hosts the acceptor's agent, which waits 40 ms
// for the ACCEPT of an offer, does the same up to 110 ms after the offer
// (offerQueuedWait): its reply and the COMMIT must still fit in the
// connector's agent's 150 ms budget; one that does not fit ends as any
// late reply does (no COMMIT: both ends overlay).
//
// Cross host (crosshost_connect.go, crosshost_accept.go): the connector's agent
// dials the acceptor's agent on the fabric (broker port 7947 on the host's
// FabricIP), or takes a connection it dialed ahead (crosshost_pool.go), and
// sends an OFFER authenticated with HMAC-SHA256 under the cluster key. The acceptor's agent checks the MAC, the clock window, the
// nonce, the sender and its own rules, then plays the connecting side of
// the local meeting: once its local ACCEPT is there (at most 40 ms after
// the offer) it writes PATH host-tcp on that TCP connection. That is a
// proposal, not yet the decision: two agents decide, each under its own
// clock, and the connector's agent gives up when its budget (150 ms from
// its CONNECT) passes, which a busy host can make it do just after the
// acceptor's agent wrote host-tcp. So the connector's agent, having read
// a valid fast PATH within its budget, writes a COMMIT (signed, carrying
// the offer's nonce) and only then hands its end to the connecting
// library; past its budget it writes nothing and closes. The acceptor's
// agent hands (or parks) its end only after reading that COMMIT, within
// commitWait (1 s); EOF, a timeout or anything but a valid COMMIT makes
// its decision overlay (no-commit) and closes the connection. Each agent
// reads exactly the bytes of the other's messages, so the application's
// data, which follows on the wire, is left for the libraries. The data
// then flows on a kernel TCP connection between the two hosts' fabric
// addresses. The library waits 250 ms for any answer (lib/src/control.c),
// well beyond the connector's 150 ms budget, and the acceptor's ACCEPT is
// answered at most 45 ms (its peer wait) plus that budget after it asks.
// With the host-tcp answer the two processes may also get a cross-host
// link (crosshost_link.go), over which their libraries set up the next connections
// between them on stock connections the connector's agent dialed ahead
// (LINK_FILL), without either agent on the path.
//
// Simultaneous connects (parked.go). Two single-threaded processes A and
// B, each listening, connect to each other at once (Open MPI's TCP
// transport does this). A blocks in its CONNECT for A->B, waiting for B's
// ACCEPT, but B accepts only after its own CONNECT for B->A returns, which
// waits for A's ACCEPT: without a rule both would wait out peer-timeout.
// So the agent tracks which local processes wait in a CONNECT right now
// (the session's pid, from the kernel; a count per tuple), and an
// acceptor whose listener's registering process (any of them,
// listeners.go) is itself waiting in a CONNECT for another tuple, or in
// an ACCEPT of another tuple from the same connecting container whose
// CONNECT has not come, is not waited for: the meeting is "parked". (The
// ACCEPT: a single-threaded server waiting in the ACCEPT of Y cannot
// accept X, and if Y's connector asks only after X is answered, as a
// library thread deciding late connects one at a time does, both would
// wait out the bound. Only that case: an acceptor with a backlog of other
// clients' connections is waited for, as a parked half it claims after
// keepDecided would be gone.) Its connector completes it at once
// as if the acceptor had asked (same host: a socketpair; cross host, on
// the acceptor's agent handling the OFFER: the host-tcp reply is written
// on the offer connection, and the half is parked only once the COMMIT
// has come), takes its own half, and the acceptor's half
// stays in the meeting until that side's ACCEPT claims it, with PATH fast,
// or until keepDecided passes: then the half is closed and the connector
// reads EOF, as it would see a reset had the connection been dropped from
// the accept queue. The rule fires in both orders, each check and its
// bookkeeping in one locked step of the CONNECT's (or OFFER's) join: a
// connector that finds the listener's process already in a CONNECT (or
// such an ACCEPT) parks its own meeting; a CONNECT from pid X parks every
// meeting that waits for an ACCEPT on a listener X registered (such an
// ACCEPT, those of its connecting container). A process's CONNECT for the very
// tuple does not count (a process connecting to itself is treated as
// today). Only the acceptor side of the tuple can claim a parked half: an
// ACCEPT naming it, from the acceptor's container (LOCAL_EP must be the
// caller's address). Once a meeting is parked, only its connector
// completes it, and an acceptor that asks meanwhile, or whose own checks
// would say overlay, takes the connector's decision, so both ends still
// agree. Across hosts the rule works per agent on its own processes: the
// first of two crossed CONNECTs is parked on the peer's agent for sure;
// the second is parked too if the first process is still in its CONNECT
// there, and otherwise meets that process's ACCEPT, which it can now send.
//
// Windows where the two ends can disagree. All need an agent (or a
// library) to die or stall far beyond the bounds above; none can deliver
// bytes to the wrong peer, and in each one both ends see their connection
// end (EOF or reset), so no application hangs in a read:
//   - Cross host, the connector's agent wrote COMMIT but died before its
//     fd reached the connecting library (or that library had given up
//     waiting, so the PATH found no reader and its fd was closed). The
//     accepting library got host-tcp and reads EOF there once the dead
//     agent's copy is closed; the connecting library keeps the overlay
//     socket, whose peer (the accepting library) has closed it: EOF.
//   - Cross host, a COMMIT that takes longer than commitWait to cross the
//     fabric although it was written within the budget: the acceptor's
//     agent closed the connection (overlay), so the connecting library's
//     host-tcp socket reads EOF or a reset, and the accepting library's
//     overlay socket reads EOF when the connector closes its overlay one.
//   - The accepting library gave up (its 250 ms) before its agent got the
//     COMMIT (a scheduling stall of more than ~50 ms on top of the full
//     budget): the agent's PATH finds no reader, its fd is closed, and
//     the connector's host-tcp socket reads EOF; the accepting library
//     keeps the overlay, whose peer the connector closed: EOF.
//   - Same host: an agent that dies between sending the two halves of a
//     socketpair. The half it still held is closed with it: the end that
//     got its half reads EOF, the other keeps its overlay socket whose
//     peer is closed.
//   - A library that dies after its ask: its end is gone anyway; the peer
//     sees EOF on whichever socket it holds.
// A connector's agent that merely passes its budget is no window any
// more: it writes no COMMIT, so both ends keep the overlay.
// An agent that is merely stopped or restarted loses its meetings; asks to
// a new agent find no record and decide afresh, and an ask that reached
// the old one gets no reply, so its library keeps the overlay (its own
// reply timeout) while the other end waits out peer-timeout: overlay too.

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
