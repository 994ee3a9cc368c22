package agent

// Design note: the verbs registry (PROTOCOL.md, "Verbs"; docs/VERBS.md).
//
// The agent introduces queue pairs and memory regions of the virtual verbs
// device and is never on the data path. It keeps, for the whole host:
//
//   - every live QP by its number (QPN, 1..0xffffff, unique on the host and
//     not given again while the QP lives: a counter that wraps and skips
//     live numbers), with the memfd of its incoming ring (a new one after
//     each reset, VERBS_QP_RESET), its doorbell if
//     it has one (docs/VERBS.md, "Completion events"), its type and PD, the
//     container and the session that made it, and the QP it was last
//     connected to (VERBS_CONNECT): on this host, or on another with the
//     TCP connection made for the pair (verbs_xhost.go);
//   - every region by its rkey, per container (random, nonzero, unique in
//     the container), with its memfds and segments, and its session;
//   - the lanes between UD QPs, each a sender's memfd (verbs_lanes.go),
//     or from a UD QP on another host a TCP connection, until its
//     receiver takes it (verbs_udx.go);
//   - the memfds those hold, once per file and container (verbs_files.go).
//
// Both belong to the provider's session that made them (one per
// ibv_open_device) and die with it: when the connection closes (the
// process exited or closed the device) its QPs' memfds are marked dead
// (the dead word, docs/VERBS.md, "Queue pair memory"), so that peers
// mapped to them fail their next work request as on a dead link, and its
// regions are forgotten. An agent that stops closes the descriptors
// without marking: the rings stay as they are, and the pairs already
// connected keep their data path.
//
// Who asks is the session, never the message: a QPN or rkey a caller
// names is looked up among its own session's (or, for a grant, among the
// regions of the session that owns the QP its own QP is connected to).
// Each limit is per container (ARCHITECTURE.md, "Limits"), so a container
// that makes all it may changes nothing for the others.

import (
	"crypto/rand"
	"encoding/binary"
	"maps"
	"slices"
	"sync"

	"github.com/freeflow-net/freeflow/internal/protocol"
)

// Defaults of the per-container verbs limits: what the device reports
// (docs/VERBS.md, "Limits"), so a program within them is never refused.
const (
	DefaultVerbsQPs = 4096  // QPs one container may hold
	DefaultVerbsMRs = 65536 // memory regions one container may hold
	maxQPN          = 0xffffff
)

// vqp is one registered queue pair.
type vqp struct {
	qpn       uint32
	container string
	owner     *session
	typ, pd   uint32
	fd        int     // the memfd of its incoming ring (held, verbs_files.go)
	file      fileKey // names fd among the container's held files
	bell      int     // its doorbell, handed to its peers (held too: one per context); -1: none
	bellFile  fileKey
	peer      *vqp  // connected to (VERBS_CONNECT) on this host; nil until then
	x         xpair // an RC QP's pairing with a QP on another host (verbs_xhost.go)
	// A UD QP's lanes (verbs_lanes.go).
	lanes      []*vlane        // to it, live, in id order (from another host: not handed yet)
	lastLane   uint32          // the id it was given last; none is given twice
	sent       map[*vqp]*vlane // from it, by receiving QP
	xaccepting int             // lanes to it from other hosts accepted, their COMMIT awaited (verbs_udx.go)
}

// vmr is one registered memory region.
type vmr struct {
	rkey      uint32
	container string
	owner     *session
	mr        protocol.VerbsMR
	segs      []protocol.Segment
	fds       []int     // one per segment (held, verbs_files.go)
	files     []fileKey // names each of fds among the container's held files
}

// verbsRegistry holds the host's QPs and regions.
type verbsRegistry struct {
	mu      sync.Mutex
	qps     map[uint32]*vqp
	mrs     map[string]map[uint32]*vmr       // container id -> rkey -> region
	qpsOf   map[string]int                   // container id -> its QPs
	files   map[string]map[fileKey]*heldFile // container id -> the memfds its QPs and regions hold
	parked  map[string]int                   // container id -> the sockets parked for its QPs (verbs_xhost.go, verbs_udx.go)
	nextQP  uint32
	maxQPs  int
	maxMRs  int
	fdShare func() int // distinct memfds one container may hold now (verbs_files.go)
	// owned lists what each session made, to forget it when the session ends.
	owned map[*session]*verbsOwned
}

type verbsOwned struct {
	qps map[uint32]*vqp
	mrs map[uint32]*vmr
}

func newVerbsRegistry(maxQPs, maxMRs int, fdShare func() int) *verbsRegistry {
	return &verbsRegistry{
		qps: map[uint32]*vqp{}, mrs: map[string]map[uint32]*vmr{}, qpsOf: map[string]int{},
		files: map[string]map[fileKey]*heldFile{}, parked: map[string]int{}, owned: map[*session]*verbsOwned{},
		maxQPs: maxQPs, maxMRs: maxMRs, fdShare: fdShare,
	}
}

// ownedLocked returns what s made, making the record on first use.
func (r *verbsRegistry) ownedLocked(s *session) *verbsOwned {
	o := r.owned[s]
	if o == nil {
		o = &verbsOwned{qps: map[uint32]*vqp{}, mrs: map[uint32]*vmr{}}
		r.owned[s] = o
	}
	return o
}

// handleVerbs serves the verbs provider's requests.
func (s *session) handleVerbs(m *protocol.Message) (*protocol.Message, error) {
	if err := s.libraryRequest(m.Type); err != nil {
		return nil, err
	}
	switch m.Type {
	case protocol.TypeVerbsQPCreate:
		return s.verbsQPCreate(m)
	case protocol.TypeVerbsConnect:
		return s.verbsConnect(m)
	case protocol.TypeVerbsMRReg:
		return s.verbsMRReg(m)
	case protocol.TypeVerbsMRGet:
		return s.verbsMRGet(m)
	case protocol.TypeVerbsMRDereg:
		return s.verbsMRDereg(m)
	case protocol.TypeVerbsQPDestroy:
		return s.verbsQPDestroy(m)
	case protocol.TypeVerbsQPReset:
		return s.verbsQPReset(m)
	case protocol.TypeVerbsUDLane:
		return s.verbsUDLane(m)
	case protocol.TypeVerbsUDLanes:
		return s.verbsUDLanes(m)
	}
	return nil, protocol.Errorf(protocol.CodeUnknown, "%v is the agent's answer, not a request it serves", m.Type)
}

// verbsQPCreate registers the QP whose memfd the message carries.
func (s *session) verbsQPCreate(m *protocol.Message) (*protocol.Message, error) {
	q, err := m.VerbsQP()
	if err != nil {
		return nil, err
	}
	if q.Type != protocol.QPTypeRC && q.Type != protocol.QPTypeUD {
		return nil, protocol.Errorf(protocol.CodeInvalid, "QP type %d is not served: the device has RC (2) and UD (4) queue pairs", q.Type)
	}
	if len(s.inFDs) != 1 && len(s.inFDs) != 2 {
		return nil, protocol.Errorf(protocol.CodeInvalid, "VERBS_QP_CREATE carries %d file descriptors; it carries the QP's memfd and, if it has one, its doorbell", len(s.inFDs))
	}
	if err := checkQPMemfd(s.inFDs[0]); err != nil {
		return nil, err
	}
	if len(s.inFDs) == 2 {
		if err := checkDoorbell(s.inFDs[1]); err != nil {
			return nil, err
		}
	}
	qp := &vqp{container: s.self.ID, owner: s, typ: q.Type, pd: q.PD, bell: -1, x: xpair{parked: -1}}
	if err := s.a.verbs.addQP(qp, s.inFDs[0:1], s.inFDs[1:]); err != nil {
		return nil, err
	}
	return protocol.New(protocol.TypeOK, m.Seq, protocol.U32(protocol.AttrQPN, qp.qpn)), nil
}

// addQP numbers qp and holds its memfd (memfd[0]) and doorbell (bell: none or one),
// within the container's limits.
func (r *verbsRegistry) addQP(qp *vqp, memfd, bell []int) error {
	fdShare := r.fdShare()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.qpsOf[qp.container] >= r.maxQPs {
		return protocol.Errorf(protocol.CodeLimit,
			"container %s holds %d queue pairs, its limit; destroy some (ibv_destroy_qp) before making more", qp.container, r.maxQPs)
	}
	keys, fds, err := r.holdFilesLocked(qp.container, append(memfd[:1:1], bell...), fdShare)
	if err != nil {
		return err
	}
	qp.file, qp.fd = keys[0], fds[0]
	if len(bell) > 0 {
		qp.bellFile, qp.bell = keys[1], fds[1]
	}
	for { // at most maxQPs per container: a free number is always near
		r.nextQP = r.nextQP%maxQPN + 1
		if r.qps[r.nextQP] == nil {
			break
		}
	}
	qp.qpn = r.nextQP
	r.qps[qp.qpn] = qp
	r.qpsOf[qp.container]++
	r.ownedLocked(qp.owner).qps[qp.qpn] = qp
	return nil
}

// ownQP returns the live QP qpn of session s, or INVALID.
func (r *verbsRegistry) ownQPLocked(s *session, qpn uint32) (*vqp, error) {
	if qp := r.qps[qpn]; qp != nil && qp.owner == s {
		return qp, nil
	}
	return nil, protocol.Errorf(protocol.CodeInvalid,
		"QP %#x is not one this session made (VERBS_QP_CREATE); name the caller's own QP", qpn)
}

// verbsQPDestroy forgets the caller's QP and marks its memfd dead.
func (s *session) verbsQPDestroy(m *protocol.Message) (*protocol.Message, error) {
	qpn, err := m.U32(protocol.AttrQPN)
	if err != nil {
		return nil, err
	}
	s.a.verbs.mu.Lock()
	qp, err := s.a.verbs.ownQPLocked(s, qpn)
	var lanes []*vlane
	if err == nil {
		lanes = s.a.verbs.dropQPLocked(qp, true)
	}
	s.a.verbs.mu.Unlock()
	if qp != nil {
		s.a.retireQP(qp, true)
		s.a.verbs.ringPeersOf([]*vqp{qp})
		s.a.retireLanes(lanes, true)
	}
	return protocol.New(protocol.TypeOK, m.Seq), nil
}

// verbsQPReset gives the caller's RC QP, which its program took back to
// RESET, the memfd the message carries as its ring. Its peer may still
// produce into the old one (its program has not reset its end yet), as
// packets still reach a NIC's QP in RESET, which drops them: the old memfd
// is marked so (its dead word), and the pair is forgotten both ways, so
// that each end gets the other's new ring only once both connected again.
func (s *session) verbsQPReset(m *protocol.Message) (*protocol.Message, error) {
	qpn, err := m.U32(protocol.AttrQPN)
	if err != nil {
		return nil, err
	}
	if len(s.inFDs) != 1 {
		return nil, protocol.Errorf(protocol.CodeInvalid, "VERBS_QP_RESET carries %d file descriptors; it carries the QP's new memfd", len(s.inFDs))
	}
	if err := checkQPMemfd(s.inFDs[0]); err != nil {
		return nil, err
	}
	if err := s.a.verbs.resetQP(s, qpn, s.inFDs[0], s.a.log.Warn); err != nil {
		return nil, err
	}
	return protocol.New(protocol.TypeOK, m.Seq), nil
}

// resetQP swaps the memfd of s's RC QP qpn for memfd (held within the
// container's files: the old one goes at once, so one more for the
// swap), marks the old one reset, lets it go, and unpairs the QP, ringing
// the doorbell of the peer it was paired with, which finds the mark.
func (r *verbsRegistry) resetQP(s *session, qpn uint32, memfd int, warn func(string, ...any)) error {
	fdShare := r.fdShare()
	r.mu.Lock()
	defer r.mu.Unlock()
	qp, err := r.ownQPLocked(s, qpn)
	if err != nil {
		return err
	}
	if qp.typ != protocol.QPTypeRC {
		return protocol.Errorf(protocol.CodeInvalid, "QP %#x is a UD QP: only an RC QP's ring is renewed at a reset (a UD QP's datagrams come in lanes)", qpn)
	}
	if k, err := fileKeyOf(memfd); err != nil {
		return protocol.Errorf(protocol.CodeInvalid, "VERBS_QP_RESET of QP %#x: its memfd: %v", qpn, err)
	} else if k == qp.file {
		return protocol.Errorf(protocol.CodeInvalid, "VERBS_QP_RESET of QP %#x carries the memfd the QP has; send a new one", qpn)
	}
	keys, fds, err := r.holdFilesLocked(qp.container, []int{memfd}, fdShare+1)
	if err != nil {
		return err
	}
	if err := markQPReset(qp.fd); err != nil {
		warn("could not mark a verbs QP's old memfd reset; its peer may produce into it unread until it resets too",
			"qpn", qp.qpn, "container", qp.container, "err", err)
	}
	r.releaseFilesLocked(qp.container, []fileKey{qp.file})
	qp.file, qp.fd = keys[0], fds[0]
	if p := qp.peer; p != nil && p.peer == qp {
		p.peer = nil
		if p.bell >= 0 {
			ring(p.bell)
		}
	}
	qp.peer = nil
	r.resetPairLocked(qp, remoteQP{})
	return nil
}

// dropQPLocked removes qp from the registry, closing the socket parked
// for it, and the lanes it sends or receives from their other ends (those
// it sent and their receivers did not take kept, with died); the caller
// retires it and them.
func (r *verbsRegistry) dropQPLocked(qp *vqp, died bool) []*vlane {
	delete(r.qps, qp.qpn)
	r.resetPairLocked(qp, remoteQP{})
	if o := r.owned[qp.owner]; o != nil {
		delete(o.qps, qp.qpn)
	}
	if r.qpsOf[qp.container]--; r.qpsOf[qp.container] <= 0 {
		delete(r.qpsOf, qp.container)
	}
	return r.detachLanesLocked(qp, died)
}

// retireQP gives back a dropped QP's memfd and closes its doorbell, marking it dead first if dead.
func (a *Agent) retireQP(qp *vqp, dead bool) {
	if dead {
		if err := markQPDead(qp.fd); err != nil {
			a.log.Warn("could not mark a verbs QP's memfd dead; its peers see it live until they time out",
				"qpn", qp.qpn, "container", qp.container, "err", err)
		}
	}
	keys := []fileKey{qp.file}
	if qp.bell >= 0 {
		keys = append(keys, qp.bellFile)
	}
	a.verbs.releaseFiles(qp.container, keys)
}

// endVerbs forgets what session s made when it ends: its QPs are marked
// dead (unless the agent is stopping, design note above), its regions
// dropped.
func (a *Agent) endVerbs(s *session) {
	r, stopping := a.verbs, a.stopping()
	r.mu.Lock()
	o := r.owned[s]
	if o == nil {
		r.mu.Unlock()
		return
	}
	qps, mrs := slices.Collect(maps.Values(o.qps)), slices.Collect(maps.Values(o.mrs))
	var lanes []*vlane
	for _, qp := range qps {
		lanes = append(lanes, r.dropQPLocked(qp, !stopping)...)
	}
	for _, mr := range mrs {
		r.dropMRLocked(mr)
	}
	delete(r.owned, s)
	r.mu.Unlock()
	for _, qp := range qps {
		a.retireQP(qp, !stopping)
	}
	if !stopping {
		r.ringPeersOf(qps)
	}
	a.retireLanes(lanes, !stopping)
	for _, mr := range mrs {
		r.releaseFiles(mr.container, mr.files)
	}
}

// ringPeersOf rings the doorbell of every QP connected to one of dead
// (marked dead already), so that a program asleep in ibv_get_cq_event
// looks at its QPs and finds its peer gone, as a polling one does
// (docs/VERBS.md, "Completion events"). One pass over the host's QPs;
// a ring never blocks.
func (r *verbsRegistry) ringPeersOf(dead []*vqp) {
	gone := map[*vqp]bool{}
	for _, qp := range dead {
		gone[qp] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, q := range r.qps {
		if q.bell >= 0 && gone[q.peer] {
			ring(q.bell)
		}
	}
}

// stopping reports whether the agent is shutting down.
func (a *Agent) stopping() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closing
}

// randomKey returns a random nonzero u32.
func randomKey() uint32 {
	var b [4]byte
	for {
		rand.Read(b[:])
		if k := binary.LittleEndian.Uint32(b[:]); k != 0 {
			return k
		}
	}
}
