package agent

import (
	"net"
	"time"

	"github.com/freeflow-net/freeflow/internal/protocol"
)

// Migrating a container whose processes run the library (ARCHITECTURE.md,
// "Control flow: migrating a container"): CRIU cannot checkpoint a Unix
// connection whose other end is outside the container, which each
// session is. RELEASE closes the container's sessions, so that only
// their ends with no peer are left in its processes (CRIU takes those),
// and refuses new ones until the time it gives: the library reads EOF as
// an agent that restarted, takes the overlay meanwhile, and after the
// restore opens sessions with the destination's agent, sending its
// listeners and ledger again.

// release holds container id until until (closing its sessions), or, for
// a time already past, lets it open sessions again. A container with verbs
// QPs or regions is refused: closing its sessions would destroy them.
func (a *Agent) release(id string, until time.Time) error {
	if err := checkID("container id", id); err != nil {
		return err
	}
	if qps, mrs := a.verbs.held(id); until.After(time.Now()) && qps+mrs > 0 {
		return protocol.Errorf(protocol.CodeDenied, "container %s holds %d verbs queue pairs and %d memory regions at host %s's agent, whose shared memory cannot move; "+
			"it can move once its programs destroyed them", id, qps, mrs, a.cfg.Host)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.parkedFor, id) // held now, or serving it again after a move called off
	if !until.After(time.Now()) {
		delete(a.held, id)
		return nil
	}
	if !a.ids.has(id) {
		return protocol.Errorf(protocol.CodeNotFound, "container %s is not registered at host %s's agent", id, a.cfg.Host)
	}
	a.held[id] = until
	n := 0
	for uc, holder := range a.conns {
		if holder == id {
			uc.Close()
			n++
		}
	}
	a.log.Info("container released for a migration: sessions closed, new ones refused", "id", id, "sessions", n, "until", until)
	return nil
}

// releasing says whether container id is held for a move (RELEASE), or
// its connections were parked for one (parkedHold).
func (a *Agent) releasing(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	until, ok := a.held[id]
	parked, wasParked := a.parkedFor[id]
	if wasParked && !now.Before(parked) {
		delete(a.parkedFor, id)
	}
	return (ok && now.Before(until)) || (wasParked && now.Before(parked))
}

// parkedHold is how long a container whose connections PARK_CONTAINER
// parked is not resumed, unless its RELEASE comes first: the move's next
// step (the CLI's RELEASE follows at once), so that no connection goes
// back onto shm between the two, which the move would then find in its
// way.
const parkedHold = 30 * time.Second

// claim records uc as a session of container id, or reports false while
// id is held (the caller closes it): under one lock with release, so no
// session opened meanwhile outlives a RELEASE.
func (a *Agent) claim(uc *net.UnixConn, id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if until, ok := a.held[id]; ok {
		if time.Now().Before(until) {
			return false
		}
		delete(a.held, id)
	}
	a.conns[uc] = id
	return true
}

// held counts container id's QPs and regions.
func (r *verbsRegistry) held(id string) (qps, mrs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.qpsOf[id], len(r.mrs[id])
}
