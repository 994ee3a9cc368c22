package agent

// Bringing connections back onto shared memory (PROTOCOL.md, "Back to
// shared memory"; docs/SHM.md, "Back to shared memory").
//
// An shm connection that a process held when it forked (or passed on)
// moved down to a Unix socket pair (docs/SHM.md, "Moving down"), and its
// library never moves it back alone: it cannot tell when the other holder
// is gone. The agent can, from /proc. One parked on TCP for a migration
// (park.go) has both its ends on this host again once its container, or
// its peer's, moved back or next to the other. Every resumeEvery the
// agent looks for pairs of such ledger entries (both moved down, or both
// parked) whose sockets one process each holds, and hands both ends'
// parking threads a RESUME with a new channel's memfd (and for a parked
// one each end's side of a new bell), the same jobs and the same WATCH
// answers as a PARK's. The libraries decide: they move only once both ends are
// held quiet, so a RESUME that finds the connection busy changes nothing
// and is tried again later, less and less often. A process whose parking
// thread does not take its RESUME at once (stopped, frozen, hostile) is
// not waited for, and is left alone for a while with all its pairs; the
// pairs least recently tried go first, so no container's pairs, however
// many, keep another's from being tried.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
	"golang.org/x/sys/unix"
)

const (
	// resumeEvery is how often the agent looks for pairs to resume
	// (RESUME_EVERY), and how long one look may go on resuming.
	resumeEvery = time.Second
	// resumeTake bounds how long both ends' parking threads may take to
	// take their RESUMEs (a thread waiting in WATCH takes one at once);
	// past it what is still queued is withdrawn, and the pair not tried.
	resumeTake = 250 * time.Millisecond
	// resumeWait bounds the wait, from the push, for the answers of the
	// RESUMEs taken: well above the libraries' own bounds once they have
	// one (HOLD_MS 20 ms, PEER_MS 100 ms to meet, up to 2 s for the peer's
	// DONE, docs/SHM.md), past which neither commits.
	resumeWait = 3 * time.Second
	// resumeFirstRetry and resumeMaxRetry: a pair not moved is tried again
	// after 1 s, then twice as long each time, 60 s at most (a bulk
	// transfer is never quiet, a reader asleep in read() never lets it go);
	// so is a process that did not take its RESUME in time, with all its
	// pairs.
	resumeFirstRetry = time.Second
	resumeMaxRetry   = 60 * time.Second
	// reasonMovedDown is a ledger entry's reason for a connection its
	// library moved down from shm to a socket pair.
	reasonMovedDown = "moved-down"
	// reasonParked is a ledger entry's reason for a connection its
	// library parked on TCP at its overlay tuple (path overlay).
	reasonParked = "parked"
)

// resumeKey names a connection by its connector's endpoints (the one that
// sorts first, then the other): the same from either end.
type resumeKey [2]netip.AddrPort

func resumeKeyOf(e ledgerEntry) resumeKey {
	if e.local.Compare(e.remote) < 0 {
		return resumeKey{e.local, e.remote}
	}
	return resumeKey{e.remote, e.local}
}

// resumePair is a connection to resume: its connector's end (ROLE 1, its
// local endpoint sorts first) and its acceptor's.
type resumePair struct{ conn, acc ledgerEnd }

func (p resumePair) key() resumeKey { return resumeKey{p.conn.local, p.conn.remote} }

// movedDown says whether e is a connection its library moved down from shm.
func movedDown(e ledgerEntry) bool { return e.path == pathUnix && e.reason == reasonMovedDown }

// parked says whether e is a connection its library parked on TCP.
func parked(e ledgerEntry) bool { return e.path == pathOverlay && e.reason == reasonParked }

// offShm says whether e is a connection that may come back onto shm.
func offShm(e ledgerEntry) bool { return movedDown(e) || parked(e) }

// own says whether e's local address is its container's (a ledger can
// list anything).
func (e ledgerEnd) own() bool { return e.local.Addr().String() == e.self.IP }

// proc names e's process's parking thread.
func (e ledgerEnd) proc() watchKey { return watchKey{e.self.ID, e.l.pid} }

// resumable returns the connections of ends (the live ledger entries at
// the tuples of offShm ones) that may go back onto shm, sorted, and
// how many were left out for each reason. holders says which processes
// hold a socket inode; watching whether a process has a parking thread.
// Only an end whose local address is its own container's counts (a
// ledger can list anything: a lie must not keep another container's
// connection from moving, nor stand in for its end). A process that names
// a socket of its own that is not the pair's end harms only its own
// container's connection: that end's peer is in its container.
func resumable(ends []ledgerEnd, holders func(ino uint64) []int32, watching func(k watchKey, parked bool) bool) ([]resumePair, map[string]int) {
	at := map[[2]netip.AddrPort][]ledgerEnd{}
	for _, e := range ends {
		if e.own() {
			k := [2]netip.AddrPort{e.local, e.remote}
			at[k] = append(at[k], e)
		}
	}
	var pairs []resumePair
	skipped := map[string]int{}
	done := map[resumeKey]bool{}
	for _, e := range ends {
		k := resumeKeyOf(e.ledgerEntry)
		if !e.own() || !offShm(e.ledgerEntry) || done[k] {
			continue
		}
		done[k] = true
		mine, peers := at[[2]netip.AddrPort{e.local, e.remote}], at[[2]netip.AddrPort{e.remote, e.local}]
		why := ""
		switch {
		case len(peers) == 0:
			why = "its peer's end has no entry here"
		case len(mine) > 1 || len(peers) > 1:
			why = "several live entries at its tuple (a fork child listed it, or the tuple was reused)"
		case parked(e.ledgerEntry) != parked(peers[0].ledgerEntry) || !offShm(peers[0].ledgerEntry):
			why = "its peer's end is not off shm the same way (moved down, or parked)"
		case e.self.ID == peers[0].self.ID && e.l.pid == peers[0].l.pid:
			why = "one process holds both ends (its parking thread moves one at a time)"
		case !watching(e.proc(), parked(e.ledgerEntry)) || !watching(peers[0].proc(), parked(e.ledgerEntry)):
			why = "a process without a parking thread that takes this RESUME"
		default:
			why = cmp.Or(soleHolder(e, holders), soleHolder(peers[0], holders))
		}
		if why != "" {
			skipped[why]++
			continue
		}
		p := resumePair{conn: e, acc: peers[0]}
		if p.conn.local.Compare(p.conn.remote) > 0 {
			p.conn, p.acc = p.acc, p.conn
		}
		pairs = append(pairs, p)
	}
	slices.SortFunc(pairs, func(a, b resumePair) int {
		return cmp.Or(a.conn.local.Compare(b.conn.local), a.conn.remote.Compare(b.conn.remote))
	})
	return pairs, skipped
}

// soleHolder says why e's socket is not held by e's process alone ("" if
// it is): another holder (a fork child still there, a process it was
// passed to) may read or write the pair, which a channel would not see.
func soleHolder(e ledgerEnd, holders func(ino uint64) []int32) string {
	if e.sock == 0 {
		return "an entry that names no socket"
	}
	switch hs := holders(e.sock); {
	case len(hs) > 1:
		return "its socket is held by several processes (a fork child is still there)"
	case len(hs) == 0 || hs[0] != e.l.pid:
		return "its process no longer holds the socket its entry names"
	}
	return ""
}

// resumeBackoff is when each connection not moved (resumeKey), and each
// process that did not take its RESUME in time (watchKey), may be tried
// again, and when each connection and each container (watchKey, pid 0)
// was last tried.
type resumeBackoff map[backoffKey]resumeRetry

// backoffKey is a resumeKey or a watchKey.
type backoffKey interface{ backsOff() }

func (resumeKey) backsOff() {}
func (watchKey) backsOff()  {}

type resumeRetry struct {
	at    time.Time     // not before
	wait  time.Duration // the last wait (0: none)
	tried time.Time     // the last try (zero: never)
}

// due says whether k may be tried at now.
func (b resumeBackoff) due(k backoffKey, now time.Time) bool { return !now.Before(b[k].at) }

// failed puts k's next try off: resumeFirstRetry after its first, twice
// the last wait after each next one, resumeMaxRetry at most.
func (b resumeBackoff) failed(k backoffKey, now time.Time) {
	r := b[k]
	r.wait = min(max(2*r.wait, resumeFirstRetry), resumeMaxRetry)
	r.at = now.Add(r.wait)
	b[k] = r
}

// tried notes that p is tried at now: p and both its containers.
func (b resumeBackoff) tried(p resumePair, now time.Time) {
	for _, k := range []backoffKey{p.key(), watchKey{id: p.conn.self.ID}, watchKey{id: p.acc.self.ID}} {
		r := b[k]
		r.tried = now
		b[k] = r
	}
}

// order sorts pairs least recently tried first: those whose containers
// were tried last (the later of the two) go last, however many pairs they
// have or however often they name new ones; among those tried as
// recently, the connection tried last goes last.
func (b resumeBackoff) order(pairs []resumePair) {
	last := func(p resumePair) (time.Time, time.Time) {
		c, a := b[watchKey{id: p.conn.self.ID}].tried, b[watchKey{id: p.acc.self.ID}].tried
		if a.After(c) {
			c = a
		}
		return c, b[p.key()].tried
	}
	slices.SortStableFunc(pairs, func(x, y resumePair) int {
		xc, xk := last(x)
		yc, yk := last(y)
		return cmp.Or(xc.Compare(yc), xk.Compare(yk))
	})
}

// keep forgets the connections, processes and containers that have no
// offShm entry in ends any more (closed, moved back, or gone).
func (b resumeBackoff) keep(ends []ledgerEnd) {
	live := map[backoffKey]bool{}
	for _, e := range ends {
		if offShm(e.ledgerEntry) {
			live[resumeKeyOf(e.ledgerEntry)], live[e.proc()], live[watchKey{id: e.self.ID}] = true, true, true
		}
	}
	for k := range b {
		if !live[k] {
			delete(b, k)
		}
	}
}

// resumeLoop resumes what it can every resumeEvery until ctx is done.
func (a *Agent) resumeLoop(ctx context.Context) {
	defer a.wg.Done()
	tick := time.NewTicker(resumeEvery)
	defer tick.Stop()
	a.resumeOn(ctx, tick.C)
}

// resumeOn resumes what it can at each tick, and the parked connections
// it can when a parking thread arrives (watchers.arrived: a restored
// process's), until ctx is done. Not the socket pairs then: a forked
// process's thread arrives while its fork keeps them off for 2 s, and
// each try refused backs them off further.
func (a *Agent) resumeOn(ctx context.Context, tick <-chan time.Time) {
	backoff := resumeBackoff{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			a.resumeTick(ctx, backoff, false)
		case <-a.watch.arrived:
			a.resumeTick(ctx, backoff, true)
		}
	}
}

// resumeTick finds the connections due to resume and resumes them, one
// pair at a time, least recently tried first, for resumeEvery at most
// (and what the pair under way takes then), the parked ones alone if
// parkedOnly; never while a PARK_CONTAINER runs or waits (the parking lock).
func (a *Agent) resumeTick(ctx context.Context, backoff resumeBackoff, parkedOnly bool) {
	set, known := a.settings()
	if !known || set.NoShm { // as for a new connection
		return
	}
	if a.watch.moves.Load() > 0 || !a.watch.parking.TryLock() {
		return
	}
	defer a.watch.parking.Unlock()
	ends := a.resumeEnds()
	backoff.keep(ends)
	now := time.Now()
	// Whole tuples (resumable counts the entries at each): the connection
	// not due, and every one with an end in a process not due.
	off := map[resumeKey]bool{}
	for _, e := range ends {
		if k := resumeKeyOf(e.ledgerEntry); !backoff.due(k, now) || e.own() && !backoff.due(e.proc(), now) {
			off[k] = true
		}
	}
	ends = slices.DeleteFunc(ends, func(e ledgerEnd) bool { return off[resumeKeyOf(e.ledgerEntry)] })
	if len(ends) == 0 {
		return
	}
	pairs, skipped := resumable(ends, a.socketHolders(ends), a.watch.resumes)
	for why, n := range skipped {
		a.log.Debug("connections not brought back onto shm", "why", why, "connections", n)
	}
	backoff.order(pairs)
	stop := now.Add(resumeEvery)
	for _, p := range pairs {
		if ctx.Err() != nil || time.Now().After(stop) || a.watch.moves.Load() > 0 {
			return
		}
		if parkedOnly && !parked(p.conn.ledgerEntry) {
			continue
		}
		procs := [2]watchKey{p.conn.proc(), p.acc.proc()}
		if !backoff.due(procs[0], now) || !backoff.due(procs[1], now) {
			continue // one did not take its RESUME for a pair before
		}
		backoff.tried(p, time.Now())
		errs := a.resumePair(ctx, p, set)
		for i, k := range procs {
			if errors.Is(errs[i], errNotTaken) {
				backoff.failed(k, time.Now())
			} else {
				delete(backoff, k) // it took it: forgiven
			}
		}
		if err := errors.Join(errs[:]...); err != nil {
			backoff.failed(p.key(), time.Now())
			a.log.Debug("connection not brought back onto shm", "connector", p.conn.local, "acceptor", p.acc.local,
				"retry_in", backoff[p.key()].wait, "err", err)
			continue
		}
		delete(backoff, p.key())
		a.log.Debug("connection back on shm", "parked", parked(p.conn.ledgerEntry), "connector", p.conn.local, "acceptor", p.acc.local,
			"containers", [2]string{p.conn.self.Name, p.acc.self.Name}, "pids", [2]int32{p.conn.l.pid, p.acc.l.pid})
	}
}

// resumeEnds returns the live ledger entries at the tuples of offShm
// entries, either way, of the containers registered here, with shm, and
// not being released for a move, each checked against the socket its
// process holds (ledgers.verifyEnds). The ledgers are read a second time only
// when there is an offShm entry, and nothing is copied but those.
func (a *Agent) resumeEnds() []ledgerEnd {
	usable := map[string]bool{}
	ok := func(id string) bool {
		if u, seen := usable[id]; seen {
			return u
		}
		c, _, registered := a.ids.local(id)
		usable[id] = registered && !c.NoShm && !a.releasing(id)
		return usable[id]
	}
	tuples := map[[2]netip.AddrPort]bool{}
	a.ledgers.read(func(l *ledger) {
		l.each(func(e ledgerEntry) {
			if offShm(e) {
				tuples[[2]netip.AddrPort{e.local, e.remote}] = true
				tuples[[2]netip.AddrPort{e.remote, e.local}] = true
			}
		})
	})
	if len(tuples) == 0 {
		return nil
	}
	var out []ledgerEnd
	a.ledgers.read(func(l *ledger) {
		l.each(func(e ledgerEntry) {
			if tuples[[2]netip.AddrPort{e.local, e.remote}] {
				out = append(out, ledgerEnd{l.self, l, e})
			}
		})
	})
	// Checked against the sockets their processes hold, as conns does: a
	// restored process holds its parked sockets under new inodes.
	live, _ := a.ledgers.verifyEnds(slices.DeleteFunc(out, func(e ledgerEnd) bool { return !ok(e.self.ID) }))
	return live
}

// socketHolders returns what resumable asks of holders: the processes of
// the ends' containers (their network namespaces) that hold each of the
// ends' sockets. /proc is read on the first question only, which comes
// once every cheaper rule passed.
func (a *Agent) socketHolders(ends []ledgerEnd) func(ino uint64) []int32 {
	var held map[uint64][]int32
	return func(ino uint64) []int32 {
		if held == nil {
			nss, inos := map[nsKey]bool{}, map[uint64]bool{}
			for _, e := range ends {
				if _, k, ok := a.ids.local(e.self.ID); ok {
					nss[k] = true
				}
				inos[e.sock] = true
			}
			held = holdersIn(nss, inos)
		}
		return held[ino]
	}
}

// holdersIn returns, for each socket inode of inos, the processes of the
// network namespaces nss that hold it.
func holdersIn(nss map[nsKey]bool, inos map[uint64]bool) map[uint64][]int32 {
	out := map[uint64][]int32{}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return out // nobody holds anything: nothing is resumed
	}
	for _, p := range procs {
		pid, err := strconv.ParseInt(p.Name(), 10, 32)
		if err != nil {
			continue
		}
		if k, err := nsOfPid(int32(pid)); err != nil || !nss[k] {
			continue
		}
		for ino := range socketsOf(int32(pid)) {
			if inos[ino] {
				out[ino] = append(out[ino], int32(pid))
			}
		}
	}
	return out
}

// errNotTaken: a parking thread did not take its RESUME within resumeTake.
var errNotTaken = fmt.Errorf("its parking thread did not take the RESUME within %v", resumeTake)

// resumePair hands both ends of p a RESUME with a new channel, charged to
// both containers as a new shm connection's, and for a parked connection
// each end's side of a new bell (its TCP sockets then close), and returns
// each end's answer (nil: it moved). What a parking thread did not take within
// resumeTake is withdrawn (errNotTaken); the answers to those taken are
// awaited until resumeWait after the push. An end that moved keeps its
// charge as a PATH shm's end does; the others' go.
func (a *Agent) resumePair(ctx context.Context, p resumePair, set directory.Settings) [2]error {
	charges, _, ok := a.chargeShm([2]string{p.conn.self.ID, p.acc.self.ID}, set)
	if !ok {
		return [2]error{errors.New(reasonShmBudget)}
	}
	fds, err := resumeFDs(parked(p.conn.ledgerEntry))
	if err != nil {
		charges[0].release()
		charges[1].release()
		return [2]error{fmt.Errorf("make its shm channel: %w", err)}
	}
	ends := [2]ledgerEnd{p.conn, p.acc}
	var jobs [2]*parkJob
	for i, role := range [2]uint8{protocol.RoleConnector, protocol.RoleAcceptor} {
		jobs[i] = &parkJob{local: ends[i].local, remote: ends[i].remote, fds: fds[i], role: role,
			taken: make(chan struct{}), done: make(chan error, 1)}
		a.watch.push(ends[i].proc(), jobs[i]) // both at once: each library waits for the other
	}
	wctx, cancel := context.WithTimeout(ctx, resumeWait)
	defer cancel()
	tctx, tcancel := context.WithTimeout(wctx, resumeTake)
	defer tcancel()
	for _, job := range jobs {
		select {
		case <-job.taken:
		case <-tctx.Done():
		}
	}
	var errs [2]error
	for i, job := range jobs {
		if a.watch.withdraw(ends[i].proc(), job) {
			protocol.CloseFDs(job.fds) // never handed
			errs[i] = errNotTaken
		} else {
			errs[i] = awaitJob(wctx, job, resumeWait)
		}
		if errs[i] != nil {
			charges[i].release()
			errs[i] = fmt.Errorf("process %d: %w", ends[i].l.pid, errs[i])
			continue
		}
		a.live.adopt(ends[i].key(), charges[i])
	}
	return errs
}

// resumeFDs makes what each end's RESUME hands: the new channel's memfd
// (a descriptor each), and for a parked connection one side each of the
// channel's bell, as for a new connection (a socket pair is its own bell).
func resumeFDs(parked bool) ([2][]int, error) {
	if parked {
		hs, err := newShmHalves(shmRingSize)
		if err != nil {
			return [2][]int{}, err
		}
		return [2][]int{{hs[0].mem, hs[0].fd}, {hs[1].mem, hs[1].fd}}, nil
	}
	mem, err := newShmMemfd(shmRingSize)
	if err != nil {
		return [2][]int{}, err
	}
	dup, err := dupFD(mem)
	if err != nil {
		unix.Close(mem)
		return [2][]int{}, err
	}
	return [2][]int{{mem}, {dup}}, nil
}

// adopt gives charge, a resumed end's, to the table's entry for its key,
// which stands for its ledger entry (lackingBytes) and whose charge went
// when it moved down (follow); without an entry the ledger's bytes count
// for it, and charge goes.
func (t *connTable) adopt(k connKey, charge *shmCharge) {
	t.mu.Lock()
	defer t.mu.Unlock()
	te, ok := t.m[k]
	if !ok {
		charge.release()
		return
	}
	te.charge.release()
	te.charge, te.info.Path, te.info.Reason = charge, pathName(pathShm), ""
	t.m[k] = te
}
