package agent

import (
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/freeflow-net/freeflow/internal/protocol"
)

// Bounds of the rendezvous (see the design note in broker.go).
const (
	// meetWait is how long the first ask waits for the second; with a
	// connecting library's 5 ms wait for its offer over a link to be taken
	// first, a peer that never answers still costs at most 50 ms.
	meetWait    = 45 * time.Millisecond
	keepDecided = 5 * time.Second // a decided tuple answers late asks this long
	// finishLimit bounds the wait for the side that completes a meeting
	// (a socketpair, or a framed PATH and the wait for its COMMIT, at most
	// commitWait, on a fresh TCP connection); it is a guard against a bug,
	// never reached in normal operation.
	finishLimit = 2 * time.Second
)

// tuple names a connection by its overlay addresses, connector first.
type tuple struct{ conn, acc netip.AddrPort }

type side int

const (
	sideConnector side = iota
	sideAcceptor
)

// meeting is where the two asks about one tuple meet. Its fields are
// guarded by rendezvous.mu; arrived and done are closed under it.
type meeting struct {
	k        tuple
	lis      listenerKey // a waiting connector's: the listener whose ACCEPT it needs
	present  [2]bool
	arrived  chan struct{} // closed when both sides have asked, or m is parked
	woken    bool          // arrived is closed
	park     bool          // decide without the acceptor's ask (parked.go)
	parker   string        // the connecting container, charged for a parked half
	parkHeld bool          // m holds a place in parker's share of parked halves
	libs     [2]asking     // each side's asking library, as far as known
	done     chan struct{} // closed once dec is final
	decided  bool
	dec      decision
	halves   [2]half // each side's half of the channel; noHalf once taken or if none
	at       time.Time
	across   bool // a local connector's, its acceptor on another host: that side never asks here
}

// asking is what a meeting knows of one side's library: what its
// session's HELLO said it can take (shm.go; xlink: a cross-host link,
// crosshost_link.go), and its process, whose listener a link is granted for.
type asking struct {
	shm, link, xlink bool
	mark             bool // it marks its SYNs (CAPS bit 3)
	pid              int32
}

// half is one side's share of a fast path's channel.
type half struct {
	fd     int        // the channel's socket (for shm, the bell socket); -1 for none
	mem    int        // shm: this side's copy of the memfd; -1 otherwise
	charge *shmCharge // shm: the budget charged to this side's container
	// link is, same host (shm), this side's end of the socketpair of a
	// link between the two processes (shm.go); -1 for none.
	link int
	// xlinkListener is, across hosts (host-tcp), the acceptor's listener
	// on its host's fabric address for the connector's next connections,
	// the cross-host link (crosshost_link.go); -1 for none and on the
	// connector's side.
	xlinkListener int
	token         []byte // host-tcp: the TOKEN of the cross-host link whose listener is xlinkListener (acceptor) or whose name is name (connector)
	name          uint64 // host-tcp, connector: the name (LINK) of its cross-host link; 0 for none
}

var (
	noHalf   = half{fd: -1, mem: -1, link: -1, xlinkListener: -1}
	noHalves = [2]half{noHalf, noHalf}
)

// sockHalf is the half of a channel that is one socket per side.
func sockHalf(fd int) half { return half{fd: fd, mem: -1, link: -1, xlinkListener: -1} }

func sockHalves(fds [2]int) [2]half { return [2]half{sockHalf(fds[0]), sockHalf(fds[1])} }

// fds returns the descriptors PATH carries, in the order PROTOCOL.md gives
// (a half has a link or a cross-host link listener, never both).
func (h half) fds() []int {
	var out []int
	for _, fd := range []int{h.fd, h.mem, h.link, h.xlinkListener} {
		if fd >= 0 {
			out = append(out, fd)
		}
	}
	return out
}

// linkAttrs returns what PATH says of the half's link: LINK_TTL for a
// same-host link or a cross-host one, whose connector also gets its name
// (LINK), and both ends its TOKEN.
func (h half) linkAttrs() []protocol.Attr {
	var out []protocol.Attr
	if h.link >= 0 || h.xlinkListener >= 0 || h.name != 0 {
		out = append(out, protocol.U32(protocol.AttrLinkTTL, uint32(linkTTL.Milliseconds())))
	}
	if h.name != 0 {
		out = append(out, protocol.U64(protocol.AttrLink, h.name))
	}
	if h.token != nil {
		out = append(out, protocol.Attr{Type: protocol.AttrToken, Value: h.token})
	}
	return out
}

// close closes the descriptors of a half nobody will get and releases its
// charge.
func (h half) close() {
	closeFD(h.fd)
	closeFD(h.mem)
	closeFD(h.link)
	closeFD(h.xlinkListener)
	h.charge.release()
}

type role int

const (
	roleFirst     role = iota // wait for the other side
	roleSecond                // the other side waits: complete the meeting
	roleDecided               // already decided: the recorded decision applies
	roleDuplicate             // this side already asked about this tuple
	roleTake                  // the other side decides (or decided) without this one: take this side's half
)

// rendezvous is the table of meetings of one agent. Its lock is held only
// to read or change the table, never while waiting.
type rendezvous struct {
	mu        sync.Mutex
	m         map[tuple]*meeting
	keep      time.Duration // how long a decided tuple is remembered (keepDecided)
	lastPrune time.Time
	// asking and waitingAccept drive parking (parked.go).
	asking        [2]map[int32]map[tuple]int // by side: pid -> the CONNECTs / ACCEPTs it waits in now (a count per tuple)
	waitingAccept map[tuple]*meeting         // undecided: the connector waits for an ACCEPT
	parked        *quota                     // parked halves per connecting container (maxParkedPerContainer)
}

func newRendezvous(keep time.Duration) *rendezvous {
	return &rendezvous{
		m: map[tuple]*meeting{}, keep: keep,
		asking:        [2]map[int32]map[tuple]int{{}, {}},
		waitingAccept: map[tuple]*meeting{},
		parked:        newQuota(maxParkedPerContainer),
	}
}

func newMeeting(k tuple) *meeting {
	return &meeting{k: k, arrived: make(chan struct{}), done: make(chan struct{}), halves: noHalves}
}

// join records that side s asked about k. li is set for a connector that
// waits on this agent for a local ACCEPT (nil otherwise): the meeting may
// then be parked at once, or later. c is set for a local process's
// CONNECT or ACCEPT, which the caller ends with endAsk (parked.go). lib is the
// asking library (its zero value across hosts: no shm, no link); a
// waiting connector also records, for a meeting that may be parked,
// whether its listener's processes can take shm.
func (r *rendezvous) join(k tuple, s side, li *listenerInfo, c *connector, lib asking) (*meeting, role) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pruneLocked(time.Now())
	if c != nil && s == sideConnector {
		r.beginAskLocked(c, s, k)
	}
	m := r.reusedLocked(k, s)
	switch {
	case m == nil:
		m = newMeeting(k)
		m.present[s], m.libs[s] = true, lib
		r.m[k] = m
		if c != nil && s == sideAcceptor { // it will wait for the CONNECT
			r.beginAskLocked(c, s, k)
		}
		if li != nil {
			m.libs[sideAcceptor] = asking{shm: li.shm}
			r.awaitAcceptLocked(m, li)
		}
		return m, roleFirst
	case m.decided && m.parkedFor(s):
		m.present[s] = true
		return m, roleTake
	case m.decided:
		return m, roleDecided
	case m.present[s]:
		return m, roleDuplicate
	case m.park:
		m.present[s] = true
		return m, roleTake
	}
	m.present[s], m.libs[s] = true, lib
	delete(r.waitingAccept, k)
	m.wakeLocked()
	return m, roleSecond
}

// reusedLocked returns k's meeting for an ask of side s, or nil when there
// is none or it belongs to an earlier connection: a library asks once per
// connection, so once both ends asked and took what they were given, a new
// ask means the 4-tuple was reused (the overlay socket is closed after a
// swap, so its port is free again, and a busy client reuses it within
// seconds). That record is dropped and k meets afresh. A meeting that
// still waits for one side's ask (a late ask, a parked half) is kept.
func (r *rendezvous) reusedLocked(k tuple, s side) *meeting {
	m := r.m[k]
	if m == nil || !m.decided || !m.present[sideConnector] || !(m.present[sideAcceptor] || m.across) ||
		m.halves[sideConnector].fd >= 0 || m.halves[sideAcceptor].fd >= 0 {
		return m
	}
	delete(r.m, k)
	return nil
}

// wakeLocked wakes the side waiting in await.
func (m *meeting) wakeLocked() {
	if !m.woken {
		m.woken = true
		close(m.arrived)
	}
}

// markAcross marks m as a local connector's whose acceptor is on
// another host (reusedLocked).
func (r *rendezvous) markAcross(m *meeting) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m.across = true
}

// recorded is m's recorded decision for a repeated ask (recordedLocked).
func (r *rendezvous) recorded(m *meeting) decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	return m.recordedLocked()
}

// decideNow records an at-once decision d of side s for k, unless the
// tuple is decided already, and returns the decision s gets. A side
// waiting for s gets d too. If s is the acceptor of a parked meeting
// (decided or being completed without it), s gets its half instead: the
// meeting is returned, and the caller takes the half from it.
func (r *rendezvous) decideNow(k tuple, s side, d decision) (decision, *meeting) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.reusedLocked(k, s)
	switch {
	case m == nil:
		m = newMeeting(k)
		r.m[k] = m
	case m.decided && m.parkedFor(s), !m.decided && m.park && !m.present[s]:
		m.present[s] = true
		return d, m
	case m.decided:
		return m.recordedLocked(), nil
	case m.present[s]:
		return overlay(reasonDuplicate), nil
	}
	m.present[s] = true
	r.decideLocked(m, d, noHalves)
	return d, nil
}

// recordedLocked is the answer to a late ask: the recorded overlay, or for
// a fast path (whose halves both ends already hold) a duplicate.
func (m *meeting) recordedLocked() decision {
	if m.dec.kind != pathOverlay {
		return overlay(reasonDuplicate)
	}
	return m.dec
}

// decide makes d with the channel's sockets fds, one per side, the
// decision of m. It reports false, and closes fds, if m was decided
// already.
func (r *rendezvous) decide(m *meeting, d decision, fds [2]int) bool {
	return r.decideHalves(m, d, sockHalves(fds))
}

// decideHalves is decide for any channel; it closes hs if m was decided.
func (r *rendezvous) decideHalves(m *meeting, d decision, hs [2]half) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m.decided {
		closeHalves(hs)
		return false
	}
	r.decideLocked(m, d, hs)
	return true
}

func (r *rendezvous) decideLocked(m *meeting, d decision, hs [2]half) {
	m.decided, m.dec, m.halves, m.at = true, d, hs, time.Now()
	delete(r.waitingAccept, m.k)
	close(m.done)
	if !m.present[sideAcceptor] && hs[sideAcceptor].fd >= 0 {
		time.AfterFunc(r.keep, func() { r.expire(m) })
	} else if hs[sideAcceptor].fd < 0 {
		r.unparkLocked(m) // nothing was parked after all
	}
}

// turn is what a first side finds when its wait in await ends.
type turn int

const (
	turnDecided turn = iota // m is decided (perhaps just now: peer-timeout)
	turnBoth                // both sides asked; the second completes m
	turnParked              // the connector completes m without the acceptor
)

// await waits until the other side asks, m is parked or decided, or wait
// passes; then, if more is not nil, as long again as more says (it is
// called with no lock held, each time the wait passes, until it says 0).
// On timeout it decides overlay (peer-timeout) unless the other side
// arrived or m was parked meanwhile.
func (r *rendezvous) await(m *meeting, wait time.Duration, more func() time.Duration) turn {
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-m.arrived:
		case <-m.done:
		case <-t.C:
			if more == nil {
				break
			}
			if wait = more(); wait > 0 {
				t.Reset(wait)
				continue
			}
		}
		break
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case m.decided:
		return turnDecided
	case m.park:
		return turnParked
	case m.present[0] && m.present[1]:
		return turnBoth
	}
	r.decideLocked(m, overlay(reasonTimeout), noHalves)
	return turnDecided
}

// takeHalf waits for m's decision and returns it with side s's half,
// which the caller then owns.
func (r *rendezvous) takeHalf(m *meeting, s side) (decision, half) {
	t := time.NewTimer(finishLimit)
	defer t.Stop()
	select {
	case <-m.done:
	case <-t.C:
		r.decide(m, overlay(reasonAgentStuck), [2]int{-1, -1})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	h := m.halves[s]
	m.halves[s] = noHalf
	if s == sideAcceptor {
		r.unparkLocked(m)
	}
	return m.dec, h
}

// decision returns m's decision once it is final.
func (r *rendezvous) decision(m *meeting) decision {
	d, h := r.takeHalf(m, sideConnector)
	h.close()
	return d
}

// pruneLocked forgets tuples decided more than r.keep ago, at most once a
// second, closing halves nobody took.
func (r *rendezvous) pruneLocked(now time.Time) {
	if now.Sub(r.lastPrune) < time.Second {
		return
	}
	r.lastPrune = now
	for k, m := range r.m {
		if m.decided && now.Sub(m.at) > r.keep {
			closeHalves(m.halves)
			m.halves = noHalves // expire may still run for m
			r.unparkLocked(m)
			delete(r.m, k)
		}
	}
}

// meet is one side's whole rendezvous on this agent: join, wait for the
// other side or the bound, and take the decision. finish completes the
// meeting when this side asks second, or when it is a connector whose
// meeting was parked (nil: the other side completes it). li, c and lib
// are as for join.
func (a *Agent) meet(k tuple, s side, li *listenerInfo, c *connector, lib asking, finish func(*meeting)) (decision, half) {
	until := time.Now().Add(queuedWait)
	m, role := a.rv.join(k, s, li, c, lib)
	switch role {
	case roleDuplicate:
		return overlay(reasonDuplicate), noHalf
	case roleDecided:
		return a.rv.recorded(m), noHalf
	case roleFirst:
		var t turn
		if li != nil { // a local connector: its acceptor may be slow to accept (acceptq.go)
			t = a.awaitAccept(m, meetWait, li, until)
		} else {
			t = a.rv.await(m, meetWait, nil)
		}
		if t == turnParked && finish != nil {
			finish(m)
		}
	case roleSecond:
		if finish != nil {
			finish(m)
		}
	}
	return a.rv.takeHalf(m, s)
}

// finishLocal completes a same-host meeting: with an shm channel when both
// ends can take one (shm.go), and a link with it when the rules for one
// hold, else with a socketpair, whose reason then says why not shm; one
// half for each end.
func (a *Agent) finishLocal(m *meeting) {
	hs, why := a.shmChannel(m)
	if why == "" {
		a.rv.decideHalves(m, decision{kind: pathShm}, hs)
		return
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		a.log.Warn("create socketpair for a fast path; using the overlay", "err", err)
		a.rv.decide(m, overlay(reasonChannelFailed), [2]int{-1, -1})
		return
	}
	a.sizeUnixPair(fds)
	a.rv.decide(m, decision{kind: pathUnix, reason: why}, [2]int{fds[0], fds[1]})
}

func closeHalves(hs [2]half) {
	for _, h := range hs {
		h.close()
	}
}

func closeFD(fd int) {
	if fd >= 0 {
		syscall.Close(fd)
	}
}
