package agent

// Design note: the shared-memory channel (docs/SHM.md is the contract).
//
// A same-host fast path is an shm channel when, at the moment the meeting
// is completed (finishLocal): both asking libraries said CAPS shm in their
// session's HELLO (for a parked meeting, whose acceptor has not asked,
// every process that registered the listener did); neither container runs
// with --no-shm; the cluster settings have been read and do not turn shm
// off; and both containers are within their budget. Otherwise it is the
// socketpair of before, and the decision's reason says why not shm, the
// first of these that applies (shm-off, shm-off-cluster, lib-no-shm,
// no-cluster-settings, shm-budget, shm-failed), so `freeflow conns` can
// show it. Both ends get the same answer, as for every decision.
//
// The agent makes the memfd (sized, header written, sealed against
// shrinking and growing) and the bell socketpair, hands each end its bell
// socket and its own copy of the memfd, and closes its copies once the
// PATH replies are written. It never maps the memory, so it holds no
// reference to it afterwards: the pages are freed when both libraries
// have unmapped them, whatever the agent does (crash, restart).
//
// The budget (BROKERING.md, "Shared memory: the budget and link grants"
// has the bookkeeping): each container is charged what every live shm
// channel it is an end of holds once drained, protocol.ShmResident, and
// gets shm-budget once it would exceed its budget. Links are granted only
// while both containers hold less than half their budget (and under the
// other conditions listed there), so the other half is the room for what
// links make, which the agent sees only in the ledgers (ledger.go).

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
	"golang.org/x/sys/unix"
)

const (
	// shmRingSize is the size of each of a channel's two rings: the most
	// bytes in flight one way. TCP between two containers of one host
	// buffers up to its autotuned socket buffers (17 MiB one way measured
	// here, tcp_rmem 32 MiB; several MiB on stock sysctls), and programs
	// that write a whole message before they read rely on it, so a ring
	// holds as much as the layout allows. Its pages cost memory only while
	// bytes pass through them: past the first protocol.ShmKeep they are
	// given back once the ring has drained and stayed idle (docs/SHM.md).
	shmRingSize = protocol.ShmRingMax
	// linkTTL is how long a connecting library may offer connections over
	// a link (LINK_TTL): short, so the budget check that granted the link
	// stays close to the truth.
	linkTTL = 2 * time.Second
	// DefaultShmBudget is how many bytes of shm channels a container may
	// be charged for at once unless the cluster settings say otherwise:
	// room for about 15 800 channels (shmChannelBytes each), so 10 000
	// idle connections between two containers fit. A channel that moved no
	// data holds only its header page; the budget bounds what drained
	// channels can pin.
	DefaultShmBudget = 8 << 30
)

// shmChannelBytes is what one channel is charged to each of its ends:
// what it holds once drained (528 KiB), not the bytes in flight of a
// burst (the design note above says why).
var shmChannelBytes = uint64(protocol.ShmResident(shmRingSize))

// Reasons a same-host fast path is unix rather than shm (REASON of PATH
// unix, and `freeflow conns`).
const (
	reasonLibNoShm      = "lib-no-shm"          // a library did not say CAPS shm
	reasonShmOff        = "shm-off"             // a container runs with --no-shm
	reasonShmOffCluster = "shm-off-cluster"     // the cluster runs with --no-shm
	reasonNoSettings    = "no-cluster-settings" // the cluster settings are not read yet
	reasonShmBudget     = "shm-budget"          // a container's budget is spent
	reasonShmFailed     = "shm-failed"          // the memfd could not be made
)

// shmChannel makes m's shm channel, with a link when the rules for one
// hold, or returns why m gets none.
func (a *Agent) shmChannel(m *meeting) ([2]half, string) {
	a.rv.mu.Lock()
	libs, parked := m.libs, m.park
	a.rv.mu.Unlock()
	conn, okConn := a.dir.LookupIP(m.k.conn.Addr().String())
	acc, okAcc := a.dir.LookupIP(m.k.acc.Addr().String())
	set, known := a.settings()
	switch { // what the user chose first, then what is missing
	case !okConn || !okAcc: // unregistered since the precheck: nobody to charge
		return noHalves, reasonNotContainer
	case conn.NoShm || acc.NoShm:
		return noHalves, reasonShmOff
	case known && set.NoShm:
		return noHalves, reasonShmOffCluster
	case !libs[sideConnector].shm || !libs[sideAcceptor].shm:
		return noHalves, reasonLibNoShm
	case !known:
		return noHalves, reasonNoSettings
	}
	ids := [2]string{conn.ID, acc.ID}
	charges, listed, ok := a.chargeShm(ids, set)
	if !ok {
		return noHalves, reasonShmBudget
	}
	hs, err := newShmHalves(shmRingSize)
	if err != nil {
		a.log.Warn("create a shared-memory channel; using a socketpair", "err", err)
		charges[0].release()
		charges[1].release()
		return noHalves, reasonShmFailed
	}
	hs[sideConnector].charge, hs[sideAcceptor].charge = charges[sideConnector], charges[sideAcceptor]
	if a.linkAllowed(libs, parked, ids, listenerKey{acc.ID, m.k.acc.Port()}, shmLimit(set), listed) {
		hs[sideConnector].link, hs[sideAcceptor].link = a.newLink()
	}
	return hs, ""
}

// linkAllowed applies the rules for a link with a new shm channel between
// containers ids whose acceptor listens on lis (the design note above);
// listed is chargeShm's walk of their ledgers.
func (a *Agent) linkAllowed(libs [2]asking, parked bool, ids [2]string, lis listenerKey, limit uint64,
	listed map[string]uint64) bool {
	if !libs[sideConnector].link || !libs[sideAcceptor].link || !a.ledgers.holds(libs[sideConnector].pid) ||
		!a.linkListener(parked, libs[sideAcceptor], lis, true) {
		return false
	}
	for _, id := range ids {
		if 2*a.shmHeld(id, listed[id]) >= limit {
			return false
		}
	}
	return true
}

// linkListener applies the rules of every link grant, same host or cross
// host, about its listener lis: the meeting is not parked (acc, the
// acceptor, asked itself), the agent holds acc's process's ledger, and no
// other process may take a connection offered over the link.
//   - Same host, acc's process is the only one of those that registered lis
//     to have accepted on it (a pre-forking server's master holds it but
//     never accepts). A connection another process accepts later is not
//     lost: an acceptor takes an offer only for the connection accept()
//     returned to it, so that one finds none and both ends ask the agent.
//   - Cross host, acc's process alone registered lis: an accepting library
//     waiting in accept() takes an offer before the kernel hands it the
//     connection, which another process could get.
func (a *Agent) linkListener(parked bool, acc asking, lis listenerKey, sameHost bool) bool {
	if parked || !a.ledgers.holds(acc.pid) {
		return false
	}
	if sameHost {
		return a.listeners.soleAcceptor(lis.id, lis.port, acc.pid)
	}
	pid, ok := a.listeners.sole(lis.id, lis.port)
	return ok && pid == acc.pid
}

// newLink returns the two ends of a link, or -1s if the socketpair cannot
// be made: the channel then goes without one.
func (a *Agent) newLink() (int, int) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		a.log.Warn("create a link's socketpair; the shm channel goes without one", "err", err)
		return -1, -1
	}
	return fds[0], fds[1]
}

// shmLimit is the budget of each container under settings set.
func shmLimit(set directory.Settings) uint64 {
	if set.ShmBudget == 0 {
		return DefaultShmBudget
	}
	return set.ShmBudget
}

// chargeShm reserves one channel's memory on each of the two containers'
// budgets, first dropping entries of exited processes if that is what
// stands in the way. It returns what it found in their ledgers
// (untabledBytes), so that one decision walks them once: a walk reads
// every resident page of each process's ledger.
func (a *Agent) chargeShm(ids [2]string, set directory.Settings) ([2]*shmCharge, map[string]uint64, bool) {
	limit := shmLimit(set)
	listed := map[string]uint64{}
	for _, id := range ids {
		listed[id] = a.untabledBytes(id, limit)
	}
	if c, ok := a.shm.reserve(ids, limit, shmChannelBytes, listed); ok {
		return c, listed, true
	}
	a.live.prune() // processes that exited hold nothing
	a.ledgers.prune()
	for _, id := range ids {
		a.reconciled(id, ledgerCheckEvery) // nor ends closed behind the library, or moved down
		listed[id] = a.untabledBytes(id, limit)
	}
	c, ok := a.shm.reserve(ids, limit, shmChannelBytes, listed)
	return c, listed, ok
}

// shmHeld returns what container id holds now: the channels charged to it,
// and untabled, the shm entries of its processes' ledgers that no charge
// stands for (untabledBytes).
func (a *Agent) shmHeld(id string, untabled uint64) uint64 {
	mine, _ := a.shm.charged(id)
	return mine + untabled
}

// untabledBytes returns the bytes of container id's ledger shm entries
// that the connection table does not list (conns.go, reconciled), or limit
// if they are more entries than channels fit in limit: no honest
// container has those, and the walk of a container's ledgers stops there.
// The entries are copied first, so the table, which every container's
// answers need, is never locked while a container's memory is read.
func (a *Agent) untabledBytes(id string, limit uint64) uint64 {
	es, over := a.ledgers.shmEntries(id, int(limit/shmChannelBytes))
	if over {
		return limit
	}
	return a.live.lackingBytes(id, es)
}

// newShmHalves makes a channel with rings of ring bytes: the memfd, and
// the bell socketpair; each half gets one bell socket and its own copy of
// the memfd.
func newShmHalves(ring uint32) (hs [2]half, err error) {
	hs = noHalves
	defer func() {
		if err != nil {
			closeHalves(hs)
		}
	}()
	if hs[0].mem, err = newShmMemfd(ring); err != nil {
		return hs, err
	}
	if hs[1].mem, err = unix.FcntlInt(uintptr(hs[0].mem), unix.F_DUPFD_CLOEXEC, 0); err != nil {
		return hs, fmt.Errorf("duplicate the memfd: %w", err)
	}
	bell, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return hs, fmt.Errorf("create the bell socketpair: %w", err)
	}
	hs[0].fd, hs[1].fd = bell[0], bell[1]
	return hs, nil
}

// newShmMemfd returns a memfd laid out as docs/SHM.md says: 4096 + 2*ring
// bytes, the header written, the rest zero, and sealed so that neither
// end can make the other fault by resizing it.
func newShmMemfd(ring uint32) (fd int, err error) {
	hdr, err := protocol.ShmHeader(ring)
	if err != nil {
		return -1, err
	}
	fd, err = unix.MemfdCreate("freeflow-shm", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", err)
	}
	defer func() {
		if err != nil {
			unix.Close(fd)
			fd = -1
		}
	}()
	if err := unix.Ftruncate(fd, protocol.ShmSize(ring)); err != nil {
		return fd, fmt.Errorf("size the memfd to %d bytes: %w", protocol.ShmSize(ring), err)
	}
	if n, err := unix.Pwrite(fd, hdr, 0); err != nil || n != len(hdr) {
		return fd, fmt.Errorf("write the memfd header (%d of %d bytes): %w", n, len(hdr), err)
	}
	seals := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return fd, fmt.Errorf("seal the memfd: %w", err)
	}
	return fd, nil
}

// shmBudget is what the agent charged each container for the shm channels
// it made; what a container holds is that and the entries of its
// processes' ledgers that no charge stands for (shmHeld).
type shmBudget struct {
	mu    sync.Mutex
	used  map[string]uint64 // container id -> bytes charged
	total uint64
}

func newShmBudget() *shmBudget { return &shmBudget{used: map[string]uint64{}} }

// shmCharge is one channel end's charge on its container. It is released
// exactly once, by whoever holds it last; a nil charge releases nothing.
type shmCharge struct {
	b        *shmBudget
	id       string
	bytes    uint64
	released atomic.Bool
}

// reserve charges size to each of ids (twice to one container that is
// both ends) if none would hold more than limit, counting what listed
// says each holds besides its charges; otherwise it charges nothing.
func (b *shmBudget) reserve(ids [2]string, limit, size uint64, listed map[string]uint64) ([2]*shmCharge, bool) {
	need := map[string]uint64{} // besides the charges: this channel and the ledgers
	for _, id := range ids {
		need[id] += size
	}
	for id := range need {
		need[id] += listed[id]
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, n := range need {
		if b.used[id]+n > limit {
			return [2]*shmCharge{}, false
		}
	}
	var out [2]*shmCharge
	for i, id := range ids {
		out[i] = b.chargeLocked(id, size)
	}
	return out, true
}

func (b *shmBudget) chargeLocked(id string, size uint64) *shmCharge {
	b.used[id] += size
	b.total += size
	return &shmCharge{b: b, id: id, bytes: size}
}

func (c *shmCharge) release() {
	if c == nil || c.released.Swap(true) {
		return
	}
	b := c.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used[c.id] -= c.bytes; b.used[c.id] == 0 {
		delete(b.used, c.id)
	}
	b.total -= c.bytes
}

// charged returns the bytes charged to container id, and to all of them
// (the ledgers not included).
func (b *shmBudget) charged(id string) (mine, all uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used[id], b.total
}
