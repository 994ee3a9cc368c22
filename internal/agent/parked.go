package agent

// Parking: the fast path of a connection decided before its acceptor
// asks, because the acceptor's process is itself blocked in a CONNECT, or
// in an ACCEPT that waits for the same connecting container (see
// "Simultaneous connects" in the design note in broker.go).

// listenerInfo names the listener a connector waits on and the processes
// that registered it; shm says whether all of them can take an shm
// channel, which a parked meeting decides for its acceptor.
type listenerInfo struct {
	key  listenerKey
	pids []int32
	shm  bool
	conn string // the connecting container, whose share a parked half takes (limits.go)
}

// awaitAcceptLocked records that m's connector waits on this agent for an
// ACCEPT on li's listener, and parks m at once if a process that
// registered it is waiting in a CONNECT, or in an ACCEPT, for another
// tuple: its ACCEPT of m cannot come before that one is answered.
func (r *rendezvous) awaitAcceptLocked(m *meeting, li *listenerInfo) {
	m.lis, m.parker = li.key, li.conn
	for _, pid := range li.pids {
		for k := range r.asking[sideConnector][pid] {
			if k != m.k && r.parkLocked(m) {
				return
			}
		}
		for k := range r.asking[sideAcceptor][pid] {
			if r.stuckBehindLocked(k, m.k) && r.parkLocked(m) {
				return
			}
		}
	}
	r.waitingAccept[m.k] = m
}

// stuckBehindLocked says whether an ACCEPT of k, which waits for its
// CONNECT, may wait for the connector of other: the same connecting
// container (its library may be deciding its connects one at a time,
// lib/src/setup/settler.c), k's CONNECT not there yet. Only then is other
// parked: an acceptor with a backlog of other clients is waited for, as
// its late ACCEPTs would find their parked halves closed.
func (r *rendezvous) stuckBehindLocked(k, other tuple) bool {
	m := r.m[k]
	return k != other && k.conn.Addr() == other.conn.Addr() && m != nil && !m.decided &&
		!m.present[sideConnector]
}

// connector is the caller of a CONNECT or an ACCEPT: its process and the
// listeners that process registered.
type connector struct {
	pid  int32
	mine map[listenerKey]bool
}

// beginAskLocked records that c's process waits in a CONNECT (s the
// connector) or an ACCEPT that must wait for its CONNECT (s the acceptor)
// for k, and parks the other meetings that wait for an ACCEPT on a
// listener it registered and that it cannot accept while it waits here:
// while in a CONNECT, all of them; while in such an ACCEPT, those of the
// same connecting container (stuckBehindLocked). It runs in the same
// locked step as the ask's join, so two crossed asks always see each
// other, whichever comes first.
func (r *rendezvous) beginAskLocked(c *connector, s side, k tuple) {
	if r.asking[s][c.pid] == nil {
		r.asking[s][c.pid] = map[tuple]int{}
	}
	r.asking[s][c.pid][k]++
	for wk, m := range r.waitingAccept {
		if c.mine[m.lis] && (s == sideConnector && wk != k || s == sideAcceptor && r.stuckBehindLocked(k, wk)) {
			r.parkLocked(m)
		}
	}
}

// endAsk records that c's ask of side s for k was answered.
func (r *rendezvous) endAsk(c *connector, s side, k tuple) {
	r.mu.Lock()
	defer r.mu.Unlock()
	asks := r.asking[s]
	if asks[c.pid][k] == 0 {
		return // an ACCEPT that did not wait (beginAskLocked)
	}
	if asks[c.pid][k]--; asks[c.pid][k] <= 0 {
		delete(asks[c.pid], k)
	}
	if len(asks[c.pid]) == 0 {
		delete(asks, c.pid)
	}
}

// parkLocked tells m's waiting connector to complete m without the
// acceptor: its half stays in m.halves until its ACCEPT claims it (join,
// decideNow) or r.keep passes (expire). The half is counted in the
// connecting container's share of parked halves; with that share used up
// m is not parked (false) and its connector waits for the ACCEPT as if no
// rule applied: at worst peer-timeout, the overlay.
func (r *rendezvous) parkLocked(m *meeting) bool {
	if !r.parked.take(m.parker) {
		return false
	}
	m.park, m.parkHeld = true, true
	delete(r.waitingAccept, m.k)
	m.wakeLocked()
	return true
}

// unparkLocked gives back m's place in its connector's share once its
// parked half is claimed, closed, or was never made.
func (r *rendezvous) unparkLocked(m *meeting) {
	if m.parkHeld {
		m.parkHeld = false
		r.parked.release(m.parker)
	}
}

// parkedFor reports whether m, decided, holds a half for side s that s
// has not asked for: a parked acceptor's half.
func (m *meeting) parkedFor(s side) bool { return !m.present[s] && m.halves[s].fd >= 0 }

// expire closes a parked half nobody claimed within r.keep. The
// connector then reads EOF on its half, as it would see a reset had the
// connection been dropped from the accept queue.
func (r *rendezvous) expire(m *meeting) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m.halves[sideAcceptor].close()
	m.halves[sideAcceptor] = noHalf
	r.unparkLocked(m)
}
