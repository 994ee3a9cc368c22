package agent

// Design note: capacity (ARCHITECTURE.md, "Limits").
//
// Everything a caller can make the agent hold is counted against the
// caller's container, never against one pool all containers share, so a
// container that exhausts its share changes nothing for the others. Who
// the caller is comes from the kernel at accept (SO_PEERCRED, then the
// network namespace of that pid, identity.go); a caller in no registered
// namespace is a stranger.
//
//   - Sessions: at most SessionsPerContainer connections of one container
//     on the library socket. The library opens one per thread, so the
//     default is generous (1024, what the whole agent took before limits
//     were per container: a program that worked alone still works). Each
//     has at most one request in flight, so requests in flight and the
//     memory a session holds (its read buffer, MaxMessage, and goroutine:
//     about 72 KiB) are bounded by it too.
//   - A connection beyond that is still told why: it is served as a
//     refusal, which answers its first message with ERROR LIMIT and closes
//     (PROTOCOL.md, "Session"), within refuseWait. At most
//     refusalsPerContainer of one container are served at once; beyond
//     those a connection is closed at accept.
//   - Strangers (no registered namespace, or a pid the kernel could not
//     name) hold no session: each is a refusal answered DENIED, at most
//     refusalsStrangers of them at once for all strangers together, as a
//     container's process that moves into a namespace of its own becomes
//     a stranger and must not gain a share per namespace it makes.
//   - The admin socket has its own AdminConns, taken only by callers that
//     may use it (root, outside every container); anyone else gets a
//     refusal (DENIED) from the strangers' or its container's share.
//
// No total is kept over the containers: the host's subnet bounds how many
// there can be, and the agent raises its RLIMIT_NOFILE at start so that
// every container of the subnet can hold its full share at once
// (fileLimit), its verbs memfds (verbs_files.go) included. Where it cannot
// (no CAP_SYS_RESOURCE and a low hard limit), it says so in its log, and a
// container's shares of sessions and verbs memfds become what the limit
// fits for each container registered now (share), lowered in the same
// proportion, at least minSessionsPerContainer and minVerbsFDs: a smaller
// share for each beats a shared pool one container can drain.

import (
	"fmt"
	"maps"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"
)

// Defaults and bounds of the per-container capacity (design note above).
const (
	DefaultSessionsPerContainer = 1024
	DefaultAdminConns           = 64
	refusalsPerContainer        = 4
	refusalsStrangers           = 64
	// refuseWait bounds a refusal: the library sends HELLO right after
	// connect, so a refused caller that says nothing within it is closed.
	refuseWait = time.Second
	// fdReserve is what the file limit keeps beyond the sessions: the
	// channels and stock in hand, parked halves, ledgers being mapped,
	// broker and pooled connections.
	fdReserve = 4096
	// minSessionsPerContainer and minVerbsFDs are the least shares a
	// short file limit lowers SessionsPerContainer and the verbs memfds
	// (verbs_files.go) to.
	minSessionsPerContainer = 16
	minVerbsFDs             = 16
	// maxParkedPerContainer bounds the parked halves (parked.go) one
	// container's connectors leave waiting at once, each up to 3
	// descriptors for up to keepDecided: a process parks one per crossed
	// connect, so even an all-to-all start of many ranks stays far below.
	maxParkedPerContainer = 128
	parkedFDs             = 3 // the most descriptors a parked half holds (shm: bell, memfd, link)
)

// strangers is the quota key shared by all callers outside every
// registered container (no container id is empty).
const strangers = ""

// quota counts what each holder (a container id) holds against one
// per-holder limit.
type quota struct {
	mu    sync.Mutex
	limit int
	held  map[string]int
}

func newQuota(limit int) *quota { return &quota{limit: limit, held: map[string]int{}} }

func (q *quota) limitNow() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.limit
}

// take counts one more for id, unless id holds its limit already.
func (q *quota) take(id string) bool { return q.takeWithin(id, q.limitNow()) }

// takeWithin is take with the limit given.
func (q *quota) takeWithin(id string, limit int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.held[id] >= limit {
		return false
	}
	q.held[id]++
	return true
}

// release returns one that take counted for id.
func (q *quota) release(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.held[id]--; q.held[id] <= 0 {
		delete(q.held, id)
	}
}

// holding returns how many id holds.
func (q *quota) holding(id string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.held[id]
}

// subnetContainers is how many containers subnet can address.
func subnetContainers(subnet netip.Prefix) uint64 {
	hostBits := min(subnet.Addr().BitLen()-subnet.Bits(), 16) // more containers than a /16 holds do not fit one host anyway
	return max(uint64(1)<<hostBits, 4) - 2
}

// all returns what every holder holds.
func (q *quota) all() map[string]int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return maps.Clone(q.held)
}

// fileLimit is the RLIMIT_NOFILE an agent for subnet needs: every
// container the subnet can address at its full share of sessions and
// verbs memfds, refusals and parked halves, the strangers, the admin
// socket and fdReserve.
func fileLimit(subnet netip.Prefix, full shares, admin int) uint64 {
	return subnetContainers(subnet)*uint64(full.sessions+full.verbsFDs+perContainerFDs) + refusalsStrangers + uint64(admin) + fdReserve
}

// perContainerFDs is what a container may hold beyond its sessions and
// its verbs memfds: its refusals, its parked halves and the stock of its
// LINK_FILLs in flight. The few descriptors of a reply being made (a
// channel's, at most 3 per side; a verbs grant's, at most 16) come from
// fdReserve.
const perContainerFDs = refusalsPerContainer + parkedFDs*maxParkedPerContainer + maxStockFill*fillsPerContainer

// shares is what one container may hold of what the file limit is sized
// for: sessions, and memfds held for its verbs QPs and regions.
type shares struct{ sessions, verbsFDs int }

// minShares are the least shares a short file limit lowers them to.
var minShares = shares{sessions: minSessionsPerContainer, verbsFDs: minVerbsFDs}

// sharesFitting is what a file limit of have fits for n containers of the
// shares full (fileLimit solved for them): full if it fits, else each
// lowered in the same proportion, to at least minShares.
func sharesFitting(n uint64, admin int, have uint64, full shares) shares {
	n = max(n, 1)
	fixed := uint64(refusalsStrangers+admin+fdReserve) + n*perContainerFDs
	if have <= fixed {
		return minShares
	}
	avail, want := (have-fixed)/n, uint64(full.sessions+full.verbsFDs)
	if avail >= want {
		return full
	}
	return shares{
		sessions: int(max(avail*uint64(full.sessions)/want, minSessionsPerContainer)),
		verbsFDs: int(max(avail*uint64(full.verbsFDs)/want, minVerbsFDs)),
	}
}

// fullShares are the shares configured.
func (a *Agent) fullShares() shares {
	return shares{sessions: a.cfg.SessionsPerContainer, verbsFDs: a.cfg.verbsFDs}
}

// share is what one container may hold now: the configured shares, or
// what the file limit fits for every container registered if that is
// less (the design note above).
func (a *Agent) share() shares {
	if files := a.files.Load(); files != 0 {
		return sharesFitting(uint64(a.ids.count()), a.cfg.AdminConns, files, a.fullShares())
	}
	return a.fullShares()
}

// sessionShare is how many sessions one container may hold now.
func (a *Agent) sessionShare() int { return a.share().sessions }

// raiseFileLimit raises RLIMIT_NOFILE to want (as far as the kernel's
// nr_open allows) if it is lower; it returns the limit now in force.
func raiseFileLimit(want uint64) (uint64, error) {
	var cur syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &cur); err != nil {
		return 0, fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	if cur.Cur >= want {
		return cur.Cur, nil
	}
	want = min(want, nrOpen())
	next := syscall.Rlimit{Cur: want, Max: max(cur.Max, want)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &next); err != nil {
		// Without CAP_SYS_RESOURCE the hard limit stays: take all of it.
		next = syscall.Rlimit{Cur: max(cur.Cur, min(want, cur.Max)), Max: cur.Max}
		if err2 := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &next); err2 != nil {
			return cur.Cur, fmt.Errorf("raise RLIMIT_NOFILE to %d: %w", want, err)
		}
		return next.Cur, fmt.Errorf("raise RLIMIT_NOFILE to %d: %w; it stays at the hard limit %d", want, err, cur.Max)
	}
	return next.Cur, nil
}

// nrOpen is the most RLIMIT_NOFILE may be (fs.nr_open).
func nrOpen() uint64 {
	var n uint64
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		fmt.Sscan(string(b), &n)
	}
	if n == 0 {
		n = 1 << 20 // the kernel's default
	}
	return n
}
