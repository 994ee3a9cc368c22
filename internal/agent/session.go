package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
)

// session is one client connection.
type session struct {
	a     *Agent
	ctx   context.Context
	conn  *protocol.Conn
	uc    *net.UnixConn
	admin bool // the admin socket, not the library socket

	pid     int32
	uid     uint32
	ns      nsKey
	peerErr error // why the caller's namespace is unknown, if it is

	slot    *quota // the share this connection is counted in (limits.go)
	holder  string // whose share: a container id, or strangers
	refused error  // set: a refusal, which answers its first message with this and closes

	hello bool                // HELLO was answered with HELLO_REPLY
	self  directory.Container // library socket: the caller's container
	caps  uint32              // CAPS of the caller's HELLO (protocol.Cap*)

	inFDs  []int // descriptors the request being served carries (LEDGER's memfd, verbs memfds), then closed
	outFDs []int // descriptors the next reply carries (PATH, VERBS_PEER_QP, VERBS_MR_GRANT, a UD lane's OK), then closed

	conns connPages // admin socket: the list this session's CONNS pages through

	watching watchKey // WATCH: the parking thread this session is (park.go)
	parking  *parkJob // the job the last PARK or RESUME carried, until the next WATCH answers it
}

func (a *Agent) serveConn(ctx context.Context, uc *net.UnixConn, admin bool) {
	defer a.untrack(uc)
	s := &session{a: a, ctx: ctx, uc: uc, admin: admin}
	defer func() {
		if r := recover(); r != nil {
			a.log.Error("handler panicked; connection closed", "pid", s.pid, "panic", r, "stack", string(debug.Stack()))
		}
	}()
	s.identifyPeer(uc)
	if !a.admit(s) {
		return
	}
	defer s.slot.release(s.holder)
	if !s.admin && s.refused == nil && !a.claim(uc, s.holder) {
		a.log.Debug("session of a container being migrated closed at accept", "container", s.holder, "pid", s.pid)
		return
	}
	defer a.endVerbs(s)
	defer a.watch.drop(s)
	s.conn = protocol.NewConn(uc) // its buffers only once the connection is counted
	for s.serveOne() {
	}
}

// admit counts s in its caller's share (limits.go): a session of its
// container or of the admin socket, or else a refusal that tells the
// caller why not. It reports false when even the refusals are used up:
// the connection is closed at once.
func (a *Agent) admit(s *session) bool {
	holder, refused := s.classify()
	if refused == nil {
		q, limit := a.sessions, a.sessionShare()
		if s.admin {
			q, limit = a.admins, a.cfg.AdminConns
		}
		if q.takeWithin(holder, limit) {
			s.slot, s.holder = q, holder
			return true
		}
		refused = a.overLimit(s, holder, limit)
	}
	q := a.refusals
	if holder == strangers {
		q = a.strangerRefusals
	}
	if !q.take(holder) {
		a.log.Debug("refusals used up; connection closed at accept", "pid", s.pid, "container", holder, "admin", s.admin)
		return false
	}
	s.slot, s.holder, s.refused = q, holder, refused
	return true
}

// classify returns whose share s is counted in, and why it is refused, if
// it is: a library caller must be in a registered container, an admin
// caller root and outside every container (checkAdmin).
func (s *session) classify() (string, error) {
	if s.admin {
		err := s.checkAdmin()
		if c, ok := s.a.identify(s.ns); ok && s.peerErr == nil {
			return c.ID, err
		}
		return strangers, err
	}
	c, err := s.caller()
	if err != nil {
		return strangers, err
	}
	s.self = c
	return c.ID, nil
}

// overLimit is the refusal of a session beyond its share.
func (a *Agent) overLimit(s *session, holder string, limit int) error {
	if s.admin {
		a.log.Warn("admin socket at its limit; refusing a connection", "limit", limit, "pid", s.pid)
		return protocol.Errorf(protocol.CodeLimit, "the admin socket of host %s serves %d connections at once; close some and retry", a.cfg.Host, limit)
	}
	a.log.Debug("container at its session limit; refusing a session", "container", holder, "limit", limit, "pid", s.pid)
	return protocol.Errorf(protocol.CodeLimit,
		"container %s holds %d sessions with the agent of host %s, its limit; this connection takes the overlay (a thread's session ends with the thread, or after %v idle)",
		holder, limit, a.cfg.Host, a.cfg.IdleTimeout)
}

// identifyPeer reads the caller's pid, uid and network namespace from the
// kernel, right after accept so the pid is still the one that connected.
func (s *session) identifyPeer(uc *net.UnixConn) {
	cred, err := peerCred(uc)
	if err != nil {
		s.peerErr = err
		return
	}
	s.pid, s.uid = cred.Pid, cred.Uid
	s.ns, s.peerErr = nsOfPid(cred.Pid)
}

// serveOne reads one request and writes its reply (none for a
// notification); it reports whether the connection stays open.
func (s *session) serveOne() bool {
	timeout := s.a.cfg.IdleTimeout
	switch {
	case s.refused != nil:
		timeout = refuseWait
	case !s.hello:
		timeout = s.a.cfg.HelloTimeout
	}
	s.conn.SetReadDeadline(time.Now().Add(timeout))
	m, fds, err := s.conn.ReadMsg()
	s.inFDs = fds
	defer func() { // a LEDGER's memfd stays mapped; a stray LINK_OFFER's are dropped
		protocol.CloseFDs(fds)
		s.inFDs = nil
	}()
	var reply *protocol.Message
	switch {
	case err == nil && s.refused != nil:
		s.replyError(m, s.refused)
		return false
	case err == nil:
		reply, err = s.handle(m)
		if errors.Is(err, errSessionEnd) {
			return false
		}
	case isDisconnect(err):
		s.a.log.Debug("connection closed", "pid", s.pid, "reason", err)
		return false
	}
	if m != nil && isNotification(m.Type) {
		return s.notified(m, err)
	}
	if err != nil {
		return s.replyError(m, err)
	}
	if !s.write(reply) {
		s.a.watch.undelivered(s) // a PARK or RESUME not written is as never handed
		return false
	}
	return true
}

// isNotification reports whether a library's message of type t is a
// notification: applied in order, never answered.
func isNotification(t protocol.Type) bool {
	return t == protocol.TypeClosed || t == protocol.TypeLedger
}

// notified finishes a notification (CLOSED, LEDGER), which is never
// answered, not even with ERROR: the library sent it without waiting, so a
// reply would be read as the answer to its next request. A refusal is only
// logged; one that closes the connection (BADMSG, VERSION, SEQUENCE)
// closes it.
func (s *session) notified(m *protocol.Message, err error) bool {
	if err == nil {
		return true
	}
	code := protocol.CodeOf(err)
	s.a.log.Debug("notification refused", "type", m.Type.String(), "pid", s.pid, "code", code.String(), "err", err)
	return !code.Closes()
}

func (s *session) replyError(m *protocol.Message, err error) bool {
	var seq uint32
	if m != nil {
		seq = m.Seq
	}
	code := protocol.CodeOf(err)
	level := slog.LevelDebug
	if code == protocol.CodeInternal || code == protocol.CodeUnavailable {
		level = slog.LevelWarn
	}
	s.a.log.Log(s.ctx, level, "request refused", "pid", s.pid, "admin", s.admin, "code", code.String(), "err", err)
	return s.write(protocol.ErrorMessage(seq, err)) && !code.Closes()
}

func (s *session) write(m *protocol.Message) bool {
	s.conn.SetWriteDeadline(time.Now().Add(s.a.cfg.WriteTimeout))
	fds := s.outFDs
	defer func() { protocol.CloseFDs(fds); s.outFDs = nil }()
	err := s.conn.WriteMsg(m, fds...)
	var pe *protocol.Error
	if errors.As(err, &pe) && m.Type != protocol.TypeError {
		// The reply did not encode (a directory record over a wire limit).
		s.a.log.Error("reply does not encode", "type", m.Type.String(), "err", err)
		err = s.conn.WriteMsg(protocol.ErrorMessage(m.Seq, protocol.Errorf(protocol.CodeInternal, "the agent could not encode its reply: %v", pe.Msg())))
	}
	if err != nil {
		s.a.log.Debug("reply not delivered; closing", "pid", s.pid, "err", err)
		return false
	}
	return true
}

// isDisconnect reports whether err ends the connection without a reply: the
// peer left, the deadline passed, or the agent is shutting down.
func isDisconnect(err error) bool {
	var pe *protocol.Error
	return !errors.As(err, &pe) || errors.Is(err, io.EOF) || errors.Is(err, os.ErrDeadlineExceeded)
}

// handle dispatches one decoded request.
func (s *session) handle(m *protocol.Message) (*protocol.Message, error) {
	if !s.hello && m.Type != protocol.TypeHello {
		return nil, protocol.Errorf(protocol.CodeSequence, "%v before HELLO: a session starts with HELLO", m.Type)
	}
	switch m.Type {
	case protocol.TypeHello:
		return s.handleHello(m)
	case protocol.TypeLookup:
		return s.handleLookup(m)
	case protocol.TypeListen, protocol.TypeUnlisten, protocol.TypeConnect, protocol.TypeAccept, protocol.TypeClosed:
		return s.handleBrokering(m)
	case protocol.TypeLedger:
		return nil, s.handleLedger()
	case protocol.TypeLinkOffer:
		return nil, protocol.Errorf(protocol.CodeInvalid, "LINK_OFFER travels between libraries over a link, never to the agent")
	case protocol.TypeLinkTake, protocol.TypeLinkCommit:
		return nil, protocol.Errorf(protocol.CodeInvalid, "%v travels on a cross-host link's stock connection, never to the agent", m.Type)
	case protocol.TypeLinkFill:
		return s.handleLinkFill(m)
	case protocol.TypeWatch:
		if s.admin {
			return nil, protocol.Errorf(protocol.CodeInvalid, "WATCH is a library's, on the library socket")
		}
		return s.handleWatch(m)
	case protocol.TypePark, protocol.TypeResume:
		return nil, protocol.Errorf(protocol.CodeUnknown, "%v is an answer to WATCH, not a request the agent serves", m.Type)
	case protocol.TypeVerbsQPCreate, protocol.TypeVerbsConnect, protocol.TypeVerbsMRReg, protocol.TypeVerbsMRGet,
		protocol.TypeVerbsMRDereg, protocol.TypeVerbsQPDestroy, protocol.TypeVerbsUDLane, protocol.TypeVerbsUDLanes,
		protocol.TypeVerbsQPReset,
		protocol.TypeVerbsPeerQP, protocol.TypeVerbsMRGrant:
		return s.handleVerbs(m)
	case protocol.TypeRegister, protocol.TypeUnregister, protocol.TypeList, protocol.TypeStatus, protocol.TypeConns,
		protocol.TypeRelease, protocol.TypeParkContainer:
		if !s.admin {
			return nil, protocol.Errorf(protocol.CodeDenied, "%v is accepted only on the admin socket", m.Type)
		}
		return s.handleAdmin(m)
	}
	return nil, protocol.Errorf(protocol.CodeUnknown, "%v is a reply, not a request the agent serves", m.Type)
}
