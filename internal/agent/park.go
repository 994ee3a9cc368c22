package agent

// Parking a migrating container's shared-memory connections on plain TCP
// (PROTOCOL.md, "Parking"; ARCHITECTURE.md, "Control flow: migrating a
// container"). CRIU cannot checkpoint an shm channel: its bell is half of a
// Unix connection whose other end is in another container, its rings a
// memfd the peer maps. So before the dump each such connection moves to a
// TCP connection at its overlay 4-tuple, which CRIU takes (--tcp-established)
// and which the overlay carries wherever the container goes.
//
// The agent makes that TCP connection without a handshake: one socket in
// each container's network namespace, put in repair mode (TCP_REPAIR, which
// needs CAP_NET_ADMIN the library has not), bound and "connected" at the
// tuple with sequence numbers both sides agree on, then taken out of repair
// mode. Each library gets its own end only, on its WATCH session (a
// socket of another tenant's namespace must never reach a container: a
// disconnected TCP socket connects anew from where it was made). The
// moving end parks first; its peer, told after, takes up its end as it
// would adopt its peer's move down (docs/SHM.md, "Parking").

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/protocol"
	"golang.org/x/sys/unix"
)

// parkWait bounds how long the moving end's library takes to park one
// connection once told: above its own worst case (the peer's consumer
// busy 1 s, then 5 s for its socket to take the ring's unread bytes,
// docs/SHM.md), so the agent never gives up on a park still under way.
const parkWait = 8 * time.Second

// parkAllWait bounds one PARK_CONTAINER, which holds the host's parking
// lock: a container that stalls its own parks delays other moves by this
// at most.
const parkAllWait = 30 * time.Second

// parkMSS is the parked connection's MSS: the overlay's MTU (1450) less
// the IPv4 and TCP headers with timestamps' room.
const parkMSS = 1398

// parkWindowScale is the window scale both ends of a parked connection
// use, as Linux picks for a receive buffer of up to 64 MiB.
const parkWindowScale = 10

// The queues TCP_REPAIR_QUEUE selects (linux/tcp.h), which x/sys lacks.
const (
	tcpRecvQueue = 1
	tcpSendQueue = 2
)

// parkJob is one connection end handed to a library's parking thread:
// to park on fds[0], a TCP socket, or with a role, to move back onto the
// shm channel whose memfd fds[0] is, a parked one with fds[1] its new
// bell (resume.go).
type parkJob struct {
	local, remote netip.AddrPort // as the library sees them
	fds           []int
	peer          bool          // the end that stays, told after its peer parked: nobody waits for its answer
	role          uint8         // RESUME's ROLE (protocol.Role*); 0: a PARK
	taken         chan struct{} // if not nil, closed once a session took the job (pop)
	done          chan error    // the library's answer: nil once parked (moved back)
}

// message is the answer to WATCH that hands job over, seq its seq.
func (j *parkJob) message(seq uint32) *protocol.Message {
	m := protocol.New(protocol.TypePark, seq,
		protocol.Endpoint(protocol.AttrLocalEndpoint, j.local), protocol.Endpoint(protocol.AttrRemoteEndpoint, j.remote))
	switch {
	case j.role != 0:
		m.Type = protocol.TypeResume
		m.Attrs = append(m.Attrs, protocol.U8(protocol.AttrRole, j.role))
	case j.peer:
		m.Attrs = append(m.Attrs, protocol.Bool(protocol.AttrFound, true))
	}
	return m
}

// refused is what a library's FOUND 0 to job means.
func (j *parkJob) refused() error {
	if j.role != 0 {
		return errNotResumed
	}
	return errNotParked
}

// errUndelivered: the PARK (RESUME) was not written; the library never had it.
var errUndelivered = errors.New("its PARK or RESUME could not be written to its session")

// watchKey names a library process's parking thread: its container (as
// the agent identified its session) and its pid. A session of another
// container that outlived a process whose pid was reused cannot take
// another container's place.
type watchKey struct {
	id  string
	pid int32
}

// watcher is a process's parking thread: the jobs for it, handed one per
// WATCH in order, and the session waiting on it now, if any.
type watcher struct {
	queue []*parkJob
	kick  chan struct{} // a job was queued
	owner *session      // the session of the thread now: only it takes jobs
}

// watchers are the libraries' parking threads, by process.
type watchers struct {
	mu sync.Mutex
	m  map[watchKey]*watcher
	// parking is held by one PARK_CONTAINER at a time (two moves must not
	// make two pairs for one connection), or by the resume tick, which only
	// takes it free and with no move waiting (moves): a move waits for one
	// RESUME pair at most (resumeTake if a thread does not take its RESUME,
	// resumeWait at most), and no connection comes back onto shm after a
	// move listed its connections.
	parking sync.Mutex
	moves   atomic.Int32 // PARK_CONTAINERs waiting for parking
	// arrived: a process's parking thread came with a new session (its
	// first, or its return after a move or a restart): the resume tick
	// looks at once, so that a restored process's parked connections come
	// back onto shm as soon as its thread is back, not at the next tick.
	arrived chan struct{}
}

func newWatchers() *watchers {
	return &watchers{m: map[watchKey]*watcher{}, arrived: make(chan struct{}, 1)}
}

// getLocked returns k's watcher, made if make_ and missing.
func (w *watchers) getLocked(k watchKey, make_ bool) *watcher {
	x := w.m[k]
	if x == nil && make_ {
		x = &watcher{kick: make(chan struct{}, 1)}
		w.m[k] = x
	}
	return x
}

// known reports whether k's parking thread has a session that sent WATCH
// and has not ended since.
func (w *watchers) known(k watchKey) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.m[k] != nil && w.m[k].owner != nil
}

// resumes says whether k's parking thread takes RESUME (its HELLO's
// CAPS), of a parked connection too if parked.
func (w *watchers) resumes(k watchKey, parked bool) bool {
	want := protocol.CapResume
	if parked {
		want |= protocol.CapResumeParked
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.m[k] != nil && w.m[k].owner != nil && w.m[k].owner.caps&want == want
}

// push queues job for k's parking thread.
func (w *watchers) push(k watchKey, job *parkJob) {
	w.mu.Lock()
	defer w.mu.Unlock()
	x := w.getLocked(k, true)
	x.queue = append(x.queue, job)
	select {
	case x.kick <- struct{}{}:
	default:
	}
}

// pop takes k's next job for s, its current session, if any.
func (w *watchers) pop(k watchKey, s *session) *parkJob {
	w.mu.Lock()
	defer w.mu.Unlock()
	x := w.m[k]
	if x == nil || x.owner != s || len(x.queue) == 0 {
		return nil
	}
	job := x.queue[0]
	x.queue = x.queue[1:]
	if job.taken != nil {
		close(job.taken)
	}
	return job
}

// withdraw takes job out of k's queue if no session took it yet.
func (w *watchers) withdraw(k watchKey, job *parkJob) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	x := w.m[k]
	if x == nil {
		return false
	}
	for i, j := range x.queue {
		if j == job {
			x.queue = append(x.queue[:i], x.queue[i+1:]...)
			return true
		}
	}
	return false
}

// undelivered, after a reply to s could not be written: a PARK or RESUME
// it carried never reached the library (its fd was closed with the reply's).
func (w *watchers) undelivered(s *session) {
	if s.parking != nil {
		s.parking.done <- errUndelivered
		s.parking = nil
	}
}

// dropGone forgets the parking threads of processes that are gone,
// closing what was queued for them.
func (w *watchers) dropGone() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, x := range w.m {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", k.pid)); err == nil {
			continue
		}
		for _, j := range x.queue {
			protocol.CloseFDs(j.fds)
			j.done <- errors.New("its process is gone")
		}
		delete(w.m, k)
	}
}

// parkShm parks every shm connection of container id whose other end is
// in another container of this host, and returns how many it parked. One
// that cannot be parked refuses them all before any is; one that fails
// while parking stops it, with the reason: the move is then refused (those
// parked stay on plain TCP, which is correct).
func (a *Agent) parkShm(ctx context.Context, id string) (int, error) {
	if err := checkID("container id", id); err != nil {
		return 0, err
	}
	a.watch.moves.Add(1)
	a.watch.parking.Lock()
	a.watch.moves.Add(-1)
	defer a.watch.parking.Unlock()
	ctx, cancel := context.WithTimeout(ctx, parkAllWait)
	defer cancel()
	a.watch.dropGone()
	a.ledgers.prune()
	var pairs []parkPair
	var lonely []ledgerEnd
	var err error
	ephemeral := ephemeralPorts()
	for try := 1; ; try++ {
		live, _ := a.ledgers.verify(a.ledgers.ends(""), 0)
		pairs, lonely, err = parkable(live, id, ephemeral)
		if err != nil || len(lonely) == 0 || try == lonelyTries {
			break
		}
		time.Sleep(lonelyWait) // a connection being set up: its peer's entry comes
	}
	for _, e := range lonely {
		a.log.Info("an shm connection whose peer closed its end is not parked: the checkpoint waits for its program to close it", "container", id, "local", e.local, "remote", e.remote)
	}
	for _, p := range pairs {
		if err == nil {
			err = a.canPark(p.m, p.p)
		}
	}
	if err != nil {
		return 0, err // before any is parked: nothing changed
	}
	n := 0
	defer func() { // parked: not resumed before the move's RELEASE (parkedHold)
		if n > 0 {
			a.mu.Lock()
			a.parkedFor[id] = time.Now().Add(parkedHold)
			a.mu.Unlock()
		}
	}()
	for _, p := range pairs {
		if !p.shared && (a.ended(p.m) || a.ended(p.p)) {
			continue // a client gone while others parked: nothing to ask its library
		}
		switch err := a.parkOne(ctx, p); {
		case err == nil:
			n++
		case !errors.Is(err, errEnded):
			return n, err
		}
	}
	if n > 0 {
		a.log.Info("shm connections parked on TCP for a migration", "container", id, "connections", n)
	}
	return n, nil
}

// lonelyTries and lonelyWait: how long the ledgers are read again while a
// moving end's peer has no entry. A connection being set up gets its
// peer's entry within this; one whose peer closed its end never does, and
// is left as it is: its program reads what is left and closes it (a
// server's clients come and go while it moves), and the checkpoint waits
// for that, as for every socket of another namespace its processes hold
// (a bell the agent made; 5 s at most, else the move is refused). Should
// its end still be there at the checkpoint, CRIU refuses it, and the
// container runs on where it was.
const (
	lonelyTries = 5
	lonelyWait  = 20 * time.Millisecond
)

// parkPair is a connection to park: its moving end, its peer's, and which
// of the two gets a port of its own at the parked connection (renumber).
type parkPair struct {
	m, p     ledgerEnd
	renumber int
	shared   bool // its 4-tuple has other live connections
}

// What parkPair.renumber says. Two live connections may share a 4-tuple
// (a swap freed the first one's overlay port, a later connection between
// the same processes got it), but only one TCP connection can be at it:
// the others are parked with a new port at their client's end, the one
// whose port is in its namespace's ephemeral range, after every other
// connection (a free port is then none a connection still to park has).
// The libraries pair the two ends by their channel's header (the moving
// end parks one not parked yet, its peer the one found parked): so the
// next connection at that tuple is parked only once the peer has taken
// the last one, and the ledger entries the agent paired stand for the
// tuple's connections, not for one each.
const (
	renumberNone = iota
	renumberM
	renumberP
)

// parkable returns container id's shm connections to park, its end
// first, then its peer's (one between two of its own processes too: its
// bell is a socket of the agent's namespace, which CRIU cannot take),
// from the host's live ledger entries, and its
// ends whose peer has no entry (lonely); or why one cannot be parked. Only
// an end whose local address is its own container's counts: a ledger can
// list anything, but must not make another container's move fail, nor
// stand in for its peer. ephemeral says whether a port is in the
// ephemeral range of a network namespace (a client's).
func parkable(live []ledgerEnd, id string, ephemeral func(ns string, port uint16) bool) (pairs []parkPair, lonely []ledgerEnd, err error) {
	own := func(e ledgerEnd) bool { return e.path == pathShm && e.local.Addr().String() == e.self.IP }
	byTuple := map[[2]netip.AddrPort][]ledgerEnd{}
	for _, e := range live {
		if own(e) {
			k := [2]netip.AddrPort{e.local, e.remote}
			byTuple[k] = append(byTuple[k], e)
		}
	}
	done := map[[2]netip.AddrPort]bool{}
	var renumbered []parkPair
	for _, e := range live {
		k := [2]netip.AddrPort{e.local, e.remote}
		if e.self.ID != id || !own(e) || done[k] {
			continue
		}
		done[k] = true
		mine, peers := byTuple[k], byTuple[[2]netip.AddrPort{e.remote, e.local}]
		if len(peers) > 0 && peers[0].self.ID == id && e.local.Compare(e.remote) > 0 {
			continue // inside the container: parked once, from its other end
		}
		if len(mine) == 1 && len(peers) == 0 {
			lonely = append(lonely, e)
			continue
		}
		if len(mine) != len(peers) || !oneProcess(mine) || !oneProcess(peers) {
			return nil, nil, protocol.Errorf(protocol.CodeDenied, "shm connection %s-%s of container %s has %d ends here and %d at its peer, not as many in one process each (a 4-tuple reused while the first lives on): it cannot be parked on TCP now; try again",
				e.local, e.remote, id, len(mine), len(peers))
		}
		renumber := renumberNone
		if len(mine) > 1 {
			switch mc, pc := ephemeral(e.self.NetNS, e.local.Port()), ephemeral(peers[0].self.NetNS, e.remote.Port()); {
			case mc && !pc:
				renumber = renumberM
			case pc && !mc:
				renumber = renumberP
			default:
				return nil, nil, protocol.Errorf(protocol.CodeDenied, "shm connections %s-%s of container %s: %d share that 4-tuple and neither port is the client's alone: they cannot be parked on TCP",
					e.local, e.remote, id, len(mine))
			}
		}
		if !e.local.Addr().Is4() || !e.remote.Addr().Is4() {
			return nil, nil, protocol.Errorf(protocol.CodeDenied, "shm connection %s-%s of container %s is not IPv4, which parking does not cover yet", e.local, e.remote, id)
		}
		for i := range mine {
			pp := parkPair{m: mine[i], p: peers[i], shared: len(mine) > 1}
			if i == 0 {
				pairs = append(pairs, pp)
			} else {
				pp.renumber = renumber
				renumbered = append(renumbered, pp)
			}
		}
	}
	return append(pairs, renumbered...), lonely, nil
}

// oneProcess says whether the ends are all of one process.
func oneProcess(ends []ledgerEnd) bool {
	for _, e := range ends {
		if e.l.pid != ends[0].l.pid {
			return false
		}
	}
	return true
}

// ephemeralPorts says whether a port is in a network namespace's
// ip_local_port_range, where connect() takes a client's port (read once
// per namespace).
func ephemeralPorts() func(ns string, port uint16) bool {
	ranges := map[string][2]int{}
	return func(ns string, port uint16) bool {
		r, ok := ranges[ns]
		if !ok {
			var b []byte
			err := netns.Do(ns, func() (err error) {
				b, err = os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
				return err
			})
			if err == nil {
				_, err = fmt.Sscan(string(b), &r[0], &r[1])
			}
			if err != nil {
				r = [2]int{32768, 60999} // Linux's default
			}
			ranges[ns] = r
		}
		return int(port) >= r[0] && int(port) <= r[1]
	}
}

// canPark says why the connection of m (moving) and p cannot be parked.
func (a *Agent) canPark(m, p ledgerEnd) error {
	what := fmt.Sprintf("shm connection %s-%s of container %s", m.local, m.remote, m.self.Name)
	for _, e := range []ledgerEnd{m, p} {
		if !a.watch.known(watchKey{e.self.ID, e.l.pid}) {
			return protocol.Errorf(protocol.CodeDenied, "%s: process %d holds it but does not wait for parking (WATCH; a library from before parking, or one whose agent session ended)", what, e.l.pid)
		}
		if e.self.NetNS == "" {
			return protocol.Errorf(protocol.CodeDenied, "%s: the directory names no network namespace for container %s", what, e.self.Name)
		}
	}
	return nil
}

// parkOne parks the connection of end pp.m (moving) and pp.p (its peer).
func (a *Agent) parkOne(ctx context.Context, pp parkPair) error {
	m, p := pp.m, pp.p
	what := fmt.Sprintf("shm connection %s-%s of container %s", m.local, m.remote, m.self.Name)
	km, kp := watchKey{m.self.ID, m.l.pid}, watchKey{p.self.ID, p.l.pid}
	var fm, fp int
	var err error
	if pp.renumber == renumberP {
		fp, fm, err = repairedPair(p.self.NetNS, p.local, p.mapped, m.self.NetNS, m.local, m.mapped, true)
	} else {
		fm, fp, err = repairedPair(m.self.NetNS, m.local, m.mapped, p.self.NetNS, p.local, p.mapped, pp.renumber == renumberM)
	}
	if err != nil {
		return protocol.Errorf(protocol.CodeInternal, "%s: %v", what, err)
	}
	// The moving end first: it decides (switch_by), its peer then adopts.
	job := &parkJob{local: m.local, remote: m.remote, fds: []int{fm}, done: make(chan error, 1)}
	a.watch.push(km, job)
	answer := awaitJob(ctx, job, parkWait)
	if answer != nil && !errors.Is(answer, errNotParked) {
		if a.watch.withdraw(km, job) || errors.Is(answer, errUndelivered) {
			unix.Close(fm) // never handed: the connection is as it was
			unix.Close(fp)
			return protocol.Errorf(protocol.CodeDenied, "%s: process %d: %v", what, m.l.pid, answer)
		}
		// Handed, not answered (or the session ended): it may have parked,
		// so its peer must take its end, at its next WATCH.
		a.log.Warn("a parked connection's moving end did not answer; its peer gets its end all the same", "connection", what, "pid", m.l.pid, "err", answer)
	}
	if errors.Is(answer, errNotParked) {
		unix.Close(fp)
	} else {
		// Marked: the peer parks only if it finds the connection parked.
		peer := &parkJob{local: p.local, remote: p.remote, fds: []int{fp}, peer: true, done: make(chan error, 1)}
		a.watch.push(kp, peer)
		if pp.shared && answer == nil {
			// Its peer takes the one found parked at the tuple: not two at once.
			if err := awaitJob(ctx, peer, parkWait); err != nil {
				return protocol.Errorf(protocol.CodeDenied, "%s: its peer's process %d: %v (the others at that 4-tuple are not parked)", what, p.l.pid, err)
			}
		}
	}
	if errors.Is(answer, errNotParked) && a.endedSoon(m, p) {
		return errEnded
	}
	if answer != nil {
		return protocol.Errorf(protocol.CodeDenied, "%s: process %d: %v", what, m.l.pid, answer)
	}
	return nil
}

// awaitJob waits for a library's answer to job, wait at most.
func awaitJob(ctx context.Context, job *parkJob, wait time.Duration) error {
	t := time.NewTimer(wait)
	defer t.Stop()
	var late error
	select {
	case err := <-job.done:
		return err
	case <-t.C:
		late = fmt.Errorf("its library did not answer within %v", wait)
	case <-ctx.Done():
		late = fmt.Errorf("its library did not answer in time (%v)", ctx.Err())
	}
	select {
	case err := <-job.done: // as time ran out: a RESUME's second end is awaited with what the first left
		return err
	default:
		return late
	}
}

// errNotParked is a library's FOUND 0 to a PARK: it left the connection
// as it was.
var errNotParked = errors.New("its library did not park it")

// errNotResumed is a library's FOUND 0 to a RESUME: the connection stays
// a socket pair.
var errNotResumed = errors.New("its library did not move it back onto shm")

// errEnded: a connection not parked because it ended meanwhile.
var errEnded = errors.New("the connection ended")

// ended says whether end e's connection has ended since the ledgers were
// read: its entry is gone (its library frees it as the program closes
// the connection) or its process no longer holds the socket it names.
func (a *Agent) ended(e ledgerEnd) bool {
	for _, x := range a.ledgers.ends(e.self.ID) {
		if x.l == e.l && x.off == e.off && x.seq == e.seq {
			held, _ := holds(x, map[*ledger]map[uint64]bool{})
			return !held
		}
	}
	return true
}

// endedSoon is ended for either end of a connection a library did not
// park, looked at for up to lonelyTries * lonelyWait: its program may be
// closing it right then (the library answers as it finds the connection
// closed, before the close is done). Nothing is left to park then (an end
// that lives on is left as a lonely one is).
func (a *Agent) endedSoon(m, p ledgerEnd) bool {
	for try := 1; ; try++ {
		if a.ended(m) || a.ended(p) {
			return true
		}
		if try == lonelyTries {
			return false
		}
		time.Sleep(lonelyWait)
	}
}

// repairedPair makes a TCP connection from a (in the namespace at nsA) to
// b (at nsB) without a handshake, and returns its two ends; an end whose
// library's socket is IPv6 (v4-mapped: a dual-stack program) is an IPv6
// socket, so the program's getpeername and IPv6 options work on as before.
// With freshA, a's end gets a free port of its namespace instead of a's.
func repairedPair(nsA string, a netip.AddrPort, a6 bool, nsB string, b netip.AddrPort, b6 bool, freshA bool) (int, int, error) {
	var isn [8]byte
	if _, err := rand.Read(isn[:]); err != nil {
		return -1, -1, err
	}
	sa, sb := binary.LittleEndian.Uint32(isn[:4]), binary.LittleEndian.Uint32(isn[4:])
	if freshA {
		a = netip.AddrPortFrom(a.Addr(), 0)
	}
	fa, err := repairedEnd(nsA, a, b, a6, sa, sb)
	if err != nil {
		return -1, -1, fmt.Errorf("its end at %s: %w", a, err)
	}
	if freshA {
		sn, err := unix.Getsockname(fa)
		if err != nil {
			unix.Close(fa)
			return -1, -1, fmt.Errorf("the port its end at %s got: %w", a.Addr(), err)
		}
		a = addrPortOf(sn)
	}
	fb, err := repairedEnd(nsB, b, a, b6, sb, sa)
	if err != nil {
		unix.Close(fa)
		return -1, -1, fmt.Errorf("its end at %s: %w", b, err)
	}
	// Only now: a side out of repair sends (a window probe) and must find the other.
	for _, fd := range []int{fa, fb} {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR, unix.TCP_REPAIR_OFF); err != nil {
			unix.Close(fa)
			unix.Close(fb)
			return -1, -1, fmt.Errorf("take the parked connection out of repair mode: %w", err)
		}
	}
	return fa, fb, nil
}

// parkSendBuffer is a parked socket's send buffer: the ring's unread
// bytes go into it at once, and a producer lets at most 7/8 of twice
// net.core.wmem_max into a ring (the library's cap, docs/SHM.md); the
// kernel doubles what is set. Only the send buffer is set: the receive
// buffer autotunes, as a handshake's would.
func parkSendBuffer() int {
	b, err := os.ReadFile("/proc/sys/net/core/wmem_max")
	n, perr := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || perr != nil || n <= 0 {
		n = 4 << 20
	}
	return max(n, 1<<20)
}

// repairedEnd makes, in the network namespace at ns, a TCP socket in
// repair mode established from local to remote (IPv4 addresses; with v6,
// an IPv6 socket at their v4-mapped forms), its next byte to send numbered
// snd and to receive rcv.
func repairedEnd(ns string, local, remote netip.AddrPort, v6 bool, snd, rcv uint32) (int, error) {
	fd := -1
	family := unix.AF_INET
	if v6 {
		family = unix.AF_INET6
	}
	err := netns.Do(ns, func() error {
		var err error
		fd, err = unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		return err
	})
	if err == nil && v6 { // before any bind: the address is v4-mapped
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0)
	}
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return -1, err
	}
	step := func(what string, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	// struct tcp_repair_opt[]: code, value. Both ends take SACK and
	// timestamps, as a handshake between two Linux stacks would agree:
	// without them a loss (the held input of a move overflowing, for one)
	// costs retransmission timeouts, seconds under a burst.
	var opts []byte
	for _, o := range [][2]uint32{
		{unix.TCPOPT_MAXSEG, parkMSS},
		{unix.TCPOPT_WINDOW, parkWindowScale | parkWindowScale<<16},
		{unix.TCPOPT_SACK_PERMITTED, 0},
		{unix.TCPOPT_TIMESTAMP, 0},
	} {
		opts = binary.NativeEndian.AppendUint32(opts, o[0])
		opts = binary.NativeEndian.AppendUint32(opts, o[1])
	}
	// A port of its own (local port 0): taken before repair mode, which
	// would let it take one in use.
	if local.Port() == 0 {
		err = step("bind "+local.String(), unix.Bind(fd, sockaddr(local, v6)))
	}
	err = errors.Join(err,
		step("repair mode (needs CAP_NET_ADMIN)", unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR, unix.TCP_REPAIR_ON)),
		step("send buffer", unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, parkSendBuffer())),
		// Before connect: connect sizes the segments it will send by it.
		step("MSS", unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG, parkMSS)),
	)
	if err == nil {
		err = errors.Join(
			step("send sequence", setQueueSeq(fd, tcpSendQueue, snd)),
			step("receive sequence", setQueueSeq(fd, tcpRecvQueue, rcv)),
		)
		if err == nil && local.Port() != 0 {
			err = step("bind "+local.String(), unix.Bind(fd, sockaddr(local, v6)))
		}
	}
	if err == nil {
		err = step("connect to "+remote.String()+" (the tuple is in use there?)", unix.Connect(fd, sockaddr(remote, v6)))
	}
	if err == nil {
		err = step("TCP options", unix.SetsockoptString(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR_OPTIONS, string(opts)))
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func setQueueSeq(fd, queue int, seq uint32) error {
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_REPAIR_QUEUE, queue); err != nil {
		return err
	}
	return unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_QUEUE_SEQ, int(seq))
}

func sockaddr(ap netip.AddrPort, v6 bool) unix.Sockaddr {
	if v6 {
		return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: netip.AddrFrom16(ap.Addr().As16()).As16()}
	}
	return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().Unmap().As4()}
}

// watchPoll is how often a WATCH that waits looks whether its library is
// still there.
const watchPoll = 500 * time.Millisecond

// errSessionEnd ends a session without a reply.
var errSessionEnd = errors.New("session ended without a reply")

// handleWatch serves WATCH: the answer to the PARK or RESUME it sent
// last, if any (FOUND 1: done; else REASON says why not), then waits for
// the next job and answers PARK with it and its TCP socket, or RESUME
// with its shm channel's memfd (and a parked connection's bell).
func (s *session) handleWatch(m *protocol.Message) (*protocol.Message, error) {
	if job := s.parking; job != nil {
		s.parking = nil
		parked, err := m.Bool(protocol.AttrFound)
		if err == nil && !parked {
			why, _ := m.String(protocol.AttrReason)
			err = fmt.Errorf("%w: %s", job.refused(), why)
		}
		if err != nil && job.peer {
			s.a.log.Warn("the staying end of a parked connection was not parked", "pid", s.pid, "local", job.local, "remote", job.remote, "err", err)
		}
		job.done <- err
	}
	k := watchKey{s.self.ID, s.pid}
	x := s.a.watch.attach(k, s)
	tick := time.NewTicker(watchPoll)
	defer tick.Stop()
	for {
		if job := s.a.watch.pop(k, s); job != nil {
			s.parking, s.outFDs = job, job.fds
			return job.message(m.Seq), nil
		}
		select {
		case <-x.kick:
		case <-s.ctx.Done():
			return nil, errSessionEnd
		case <-tick.C:
			if s.gone() {
				return nil, errSessionEnd
			}
		}
	}
}

// attach makes s the session of k's parking thread (a newer one of the
// same process replaces it, keeping what is queued).
func (w *watchers) attach(k watchKey, s *session) *watcher {
	w.mu.Lock()
	defer w.mu.Unlock()
	s.watching = k
	x := w.getLocked(k, true)
	if x.owner != s {
		select {
		case w.arrived <- struct{}{}:
		default: // a look is due already
		}
	}
	x.owner = s
	return x
}

// drop, at the end of s's session, fails the job it held (the library
// may have parked it: its peer still gets its end) and forgets its
// process's parking thread unless jobs wait for it (a new session of the
// same process takes them; dropGone closes them once it is gone).
func (w *watchers) drop(s *session) {
	if s.parking != nil {
		s.parking.done <- errors.New("its library's session ended before it answered")
		s.parking = nil
	}
	if s.watching.pid == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	x := w.m[s.watching]
	if x == nil || x.owner != s {
		return // a newer session of the process took its place
	}
	x.owner = nil
	if len(x.queue) == 0 {
		delete(w.m, s.watching)
	}
}

// gone reports whether s's peer closed it or sent something (nothing may
// come while WATCH waits).
func (s *session) gone() bool {
	rc, err := s.uc.SyscallConn()
	if err != nil {
		return true
	}
	var ready bool
	err = rc.Control(func(fd uintptr) {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLRDHUP}}
		n, _ := unix.Poll(p, 0)
		ready = n > 0
	})
	return ready || err != nil // closed by the agent: RELEASE, or its stop
}
