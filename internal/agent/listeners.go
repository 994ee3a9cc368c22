package agent

import (
	"sync"
	"time"

	"github.com/freeflow-net/freeflow/internal/protocol"
)

// listenerKey is a library-enabled listening port of a local container.
// A container has one overlay address, so a listener bound to it and one
// bound to the unspecified address are the same for the broker.
type listenerKey struct {
	id   string
	port uint16
}

// listeners is the table LISTEN and UNLISTEN keep: for each port, the
// processes that registered it. A registration outlives the control
// connection that made it (the library opens one per thread and drops it
// after a timeout, while the listening socket lives on) and ends with
// UNLISTEN or with its process, checked when the table is read: a process
// that exits without UNLISTEN leaves nothing behind that would make
// connectors wait for an ACCEPT that never comes. After an agent restart
// the table is empty until the libraries register their listeners again.
//
// A container holds at most maxListensPerContainer registrations; one more
// is refused (LIMIT) once the container's registrations of processes that
// are gone have been swept (at most once per listenSweepEvery), so a
// container whose processes exit without UNLISTEN does not run out.
type listeners struct {
	mu    sync.Mutex
	m     map[listenerKey]map[int32]registration // by pid
	byPid map[int32]map[listenerKey]bool         // m's keys by pid: every CONNECT and ACCEPT reads one process's
	held  map[string]int                         // registrations per container
	swept map[string]time.Time                   // when each container's were last swept
}

const (
	// maxListensPerContainer bounds one container's registrations (one per
	// listening port and process; a pre-forked server's workers each
	// register its port).
	maxListensPerContainer = 4096
	listenSweepEvery       = time.Second
)

// registration is one process's LISTEN.
type registration struct {
	ns      nsKey     // the process's network namespace at LISTEN
	shm     bool      // its library can take shm channels (CAPS of the session)
	mark    bool      // its library asks only about connections whose SYN has the mark
	checked time.Time // when ns was last found current
	accepts bool      // its process has asked about a connection it accepted (ACCEPT)
}

// nsCheckEvery bounds how often a registration's namespace is read again:
// a stat of /proc/<pid>/ns/net costs more than the rest of a CONNECT. In
// between, kill(pid, 0) still catches a process that exited; only a pid
// that exits and is reused by a process of another namespace within this
// time can outlive its check, and then a connector waits its meetWait for
// an ACCEPT and takes the overlay.
const nsCheckEvery = time.Second

// current reports whether pid still runs in the namespace it registered from.
func (r *registration) current(pid int32, now time.Time) bool {
	if !alive(pid) {
		return false
	}
	if now.Sub(r.checked) < nsCheckEvery {
		return true
	}
	if ns, err := nsOfPid(pid); err != nil || ns != r.ns {
		return false
	}
	r.checked = now
	return true
}

func newListeners() *listeners {
	return &listeners{m: map[listenerKey]map[int32]registration{}, byPid: map[int32]map[listenerKey]bool{},
		held: map[string]int{}, swept: map[string]time.Time{}}
}

// add registers s's process on container id's port, unless the container
// holds maxListensPerContainer registrations of live processes.
func (l *listeners) add(s *session, id string, port uint16) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := listenerKey{id, port}
	old, again := l.m[k][s.pid]
	if !again && !l.roomLocked(id) {
		return protocol.Errorf(protocol.CodeLimit,
			"container %s holds %d listener registrations, its limit; this listener's connections take the overlay", id, maxListensPerContainer)
	}
	if l.m[k] == nil {
		l.m[k] = map[int32]registration{}
	}
	if _, again := l.m[k][s.pid]; !again {
		l.held[id]++
		if l.byPid[s.pid] == nil {
			l.byPid[s.pid] = map[listenerKey]bool{}
		}
		l.byPid[s.pid][k] = true
	}
	// A process registering again (after an agent restart, a listener
	// reopened) keeps having accepted; a pid reused in another namespace does not.
	l.m[k][s.pid] = registration{ns: s.ns, shm: s.caps&protocol.CapShm != 0, mark: s.caps&protocol.CapSynMark != 0,
		accepts: again && old.ns == s.ns && old.accepts}
	return nil
}

// roomLocked reports whether container id may register one more,
// sweeping its registrations of processes that are gone first if it is
// at its limit.
func (l *listeners) roomLocked(id string) bool {
	if l.held[id] < maxListensPerContainer {
		return true
	}
	now := time.Now()
	if now.Sub(l.swept[id]) < listenSweepEvery {
		return false
	}
	l.swept[id] = now
	for k, pids := range l.m {
		if k.id != id {
			continue
		}
		for pid, reg := range pids {
			if !reg.current(pid, now) {
				l.deleteLocked(k, pid)
			}
		}
	}
	return l.held[id] < maxListensPerContainer
}

// deleteLocked forgets process pid's registration of k.
func (l *listeners) deleteLocked(k listenerKey, pid int32) {
	if _, ok := l.m[k][pid]; !ok {
		return
	}
	delete(l.m[k], pid)
	if len(l.m[k]) == 0 {
		delete(l.m, k)
	}
	delete(l.byPid[pid], k)
	if len(l.byPid[pid]) == 0 {
		delete(l.byPid, pid)
	}
	if l.held[k.id]--; l.held[k.id] <= 0 {
		delete(l.held, k.id)
		delete(l.swept, k.id)
	}
}

// remove withdraws the registration of s's process; an unknown one is
// ignored (UNLISTEN is best effort on the library's side).
func (l *listeners) remove(s *session, id string, port uint16) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deleteLocked(listenerKey{id, port}, s.pid)
}

// live returns the processes that registered container id's port, and
// whether all of them can take shm channels and all of them ask only
// about marked SYNs, forgetting registrations whose process is gone (or
// whose pid now names a process in another namespace).
func (l *listeners) live(id string, port uint16) (pids []int32, shm, marked bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	shm, marked = true, true
	l.eachCurrentLocked(listenerKey{id, port}, func(pid int32, reg registration) {
		pids = append(pids, pid)
		shm = shm && reg.shm
		marked = marked && reg.mark
	})
	return pids, shm && len(pids) > 0, marked && len(pids) > 0
}

// eachCurrentLocked calls fn for each registration of k whose process is
// current, forgetting the others.
func (l *listeners) eachCurrentLocked(k listenerKey, fn func(int32, registration)) {
	now := time.Now()
	for pid, reg := range l.m[k] {
		if !reg.current(pid, now) {
			l.deleteLocked(k, pid)
			continue
		}
		l.m[k][pid] = reg
		fn(pid, reg)
	}
}

// accepting notes that process pid asks about a connection it accepted on
// container id's port.
func (l *listeners) accepting(id string, port uint16, pid int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := listenerKey{id, port}
	if reg, ok := l.m[k][pid]; ok && !reg.accepts {
		reg.accepts = true
		l.m[k][pid] = reg
	}
}

// sole returns the process that registered container id's port if it is
// the only live one; false if none or several did.
func (l *listeners) sole(id string, port uint16) (int32, bool) {
	pids, _, _ := l.live(id, port)
	if len(pids) != 1 {
		return 0, false
	}
	return pids[0], true
}

// soleAcceptor reports whether pid registered container id's port and no
// other live process that registered it has accepted on it: the master of
// a pre-forking server (nginx's, gunicorn's) holds the listener but never
// accepts, and its one worker is the sole acceptor.
func (l *listeners) soleAcceptor(id string, port uint16, pid int32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	mine, others := false, false
	l.eachCurrentLocked(listenerKey{id, port}, func(p int32, reg registration) {
		mine = mine || p == pid
		others = others || (p != pid && reg.accepts)
	})
	return mine && !others
}

// keysOf returns the listeners process pid (in namespace ns) registered.
func (l *listeners) keysOf(pid int32, ns nsKey) map[listenerKey]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	mine := map[listenerKey]bool{}
	for k := range l.byPid[pid] {
		if l.m[k][pid].ns == ns {
			mine[k] = true
		}
	}
	return mine
}

// waitOn returns the listener on container id's port that a connection
// from container conn waits on for its ACCEPT (conn, from a library that
// marks its SYNs or not: marks), or why it takes the overlay at once on
// the acceptor's host: no library-enabled listener, or only listeners
// whose libraries will not ask about an unmarked SYN.
func (l *listeners) waitOn(id string, port uint16, conn string, marks bool) (*listenerInfo, string) {
	pids, shm, marked := l.live(id, port)
	switch {
	case len(pids) == 0:
		return nil, reasonNoListener
	case marked && !marks:
		return nil, reasonOldLibrary
	}
	return &listenerInfo{key: listenerKey{id, port}, pids: pids, shm: shm, conn: conn}, ""
}
