package agent

import (
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// Bounds of the rendezvous (see the design note in broker.go).
const (
	meetWait    = 50 * time.Millisecond // the first ask waits this long for the second
	keepDecided = 5 * time.Second       // a decided tuple answers late asks this long
	// finishLimit bounds the wait for the side that completes a meeting
	// (a socketpair, or one framed write on a fresh TCP connection); it is
	// a guard against a bug, never reached in normal operation.
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
	present [2]bool
	arrived chan struct{} // closed when both sides have asked
	done    chan struct{} // closed once dec is final
	decided bool
	dec     decision
	fds     [2]int // each side's half of the channel; -1 once taken or if none
	at      time.Time
}

type role int

const (
	roleFirst     role = iota // wait for the other side
	roleSecond                // the other side waits: complete the meeting
	roleDecided               // already decided: the recorded decision applies
	roleDuplicate             // this side already asked about this tuple
)

// rendezvous is the table of meetings of one agent. Its lock is held only
// to read or change the table, never while waiting.
type rendezvous struct {
	mu        sync.Mutex
	m         map[tuple]*meeting
	lastPrune time.Time
}

func newRendezvous() *rendezvous { return &rendezvous{m: map[tuple]*meeting{}} }

func newMeeting() *meeting {
	return &meeting{arrived: make(chan struct{}), done: make(chan struct{}), fds: [2]int{-1, -1}}
}

// join records that side s asked about k.
func (r *rendezvous) join(k tuple, s side) (*meeting, role) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pruneLocked(time.Now())
	m := r.m[k]
	switch {
	case m == nil:
		m = newMeeting()
		m.present[s] = true
		r.m[k] = m
		return m, roleFirst
	case m.decided:
		return m, roleDecided
	case m.present[s]:
		return m, roleDuplicate
	}
	m.present[s] = true
	close(m.arrived)
	return m, roleSecond
}

// decideNow records an at-once decision d of side s for k, unless the
// tuple is decided already, and returns the decision s gets. A side
// waiting for s gets d too.
func (r *rendezvous) decideNow(k tuple, s side, d decision) decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.m[k]
	switch {
	case m == nil:
		m = newMeeting()
		r.m[k] = m
	case m.decided:
		return m.recordedLocked()
	case m.present[s]:
		return overlay(reasonDuplicate)
	}
	m.present[s] = true
	r.decideLocked(m, d, [2]int{-1, -1})
	return d
}

// recordedLocked is the answer to a late ask: the recorded overlay, or for
// a fast path (whose halves both ends already hold) a duplicate.
func (m *meeting) recordedLocked() decision {
	if m.dec.kind != pathOverlay {
		return overlay(reasonDuplicate)
	}
	return m.dec
}

// decide makes d with the channel halves fds the decision of m. It reports
// false, and closes fds, if m was decided already.
func (r *rendezvous) decide(m *meeting, d decision, fds [2]int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if m.decided {
		closeHalves(fds)
		return false
	}
	r.decideLocked(m, d, fds)
	return true
}

func (r *rendezvous) decideLocked(m *meeting, d decision, fds [2]int) {
	m.decided, m.dec, m.fds, m.at = true, d, fds, time.Now()
	close(m.done)
}

// await waits until the other side asks, m is decided, or wait passes; on
// timeout it decides overlay (peer-timeout) unless the other side arrived
// meanwhile. It reports whether both sides are present and m is still
// undecided: the completing side's turn.
func (r *rendezvous) await(m *meeting, wait time.Duration) bool {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-m.arrived:
	case <-m.done:
	case <-t.C:
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	both := m.present[0] && m.present[1]
	if !both && !m.decided {
		r.decideLocked(m, overlay(reasonTimeout), [2]int{-1, -1})
	}
	return both && !m.decided
}

// take waits for m's decision and returns it with side s's descriptor,
// which the caller then owns.
func (r *rendezvous) take(m *meeting, s side) (decision, int) {
	t := time.NewTimer(finishLimit)
	defer t.Stop()
	select {
	case <-m.done:
	case <-t.C:
		r.decide(m, overlay(reasonAgentStuck), [2]int{-1, -1})
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	fd := m.fds[s]
	m.fds[s] = -1
	return m.dec, fd
}

// decision returns m's decision once it is final.
func (r *rendezvous) decision(m *meeting) decision {
	d, fd := r.take(m, sideConnector)
	closeFD(fd)
	return d
}

// pruneLocked forgets tuples decided more than keepDecided ago, at most
// once a second, closing halves nobody took.
func (r *rendezvous) pruneLocked(now time.Time) {
	if now.Sub(r.lastPrune) < time.Second {
		return
	}
	r.lastPrune = now
	for k, m := range r.m {
		if m.decided && now.Sub(m.at) > keepDecided {
			closeHalves(m.fds)
			delete(r.m, k)
		}
	}
}

// meet is one side's whole rendezvous on this agent: join, wait for the
// other side or the bound, and take the decision. finish completes the
// meeting when this side asks second (nil: the other side completes it).
func (a *Agent) meet(k tuple, s side, wait time.Duration, finish func(*meeting)) (decision, int) {
	m, role := a.rv.join(k, s)
	switch role {
	case roleDuplicate:
		return overlay(reasonDuplicate), -1
	case roleDecided:
		a.rv.mu.Lock()
		defer a.rv.mu.Unlock()
		return m.recordedLocked(), -1
	case roleFirst:
		a.rv.await(m, wait)
	case roleSecond:
		if finish != nil {
			finish(m)
		}
	}
	return a.rv.take(m, s)
}

// finishLocal completes a same-host meeting with a socketpair, one half
// for each end.
func (a *Agent) finishLocal(m *meeting) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		a.log.Warn("create socketpair for a fast path; using the overlay", "err", err)
		a.rv.decide(m, overlay(reasonChannelFailed), [2]int{-1, -1})
		return
	}
	a.rv.decide(m, decision{kind: pathUnix}, [2]int{fds[0], fds[1]})
}

func closeHalves(fds [2]int) {
	for _, fd := range fds {
		closeFD(fd)
	}
}

func closeFD(fd int) {
	if fd >= 0 {
		syscall.Close(fd)
	}
}
