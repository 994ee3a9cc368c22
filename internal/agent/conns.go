package agent

import (
	"cmp"
	"encoding/json"
	"errors"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/protocol"
)

type connKey struct {
	id            string
	local, remote netip.AddrPort
}

type connEntry struct {
	info   agentapi.ConnInfo
	pid    int32      // the library process that asked; the entry goes when it does
	charge *shmCharge // an shm end's charge, released with the entry
}

// maxConnEntriesPerContainer bounds one container's entries (limits.go):
// overlay connections of a process that lives on are never reported
// closed, so without a bound a long-running server would grow the table
// forever. Beyond it one of that container's own entries makes room, an
// overlay one if it finds one, so no container can push another's
// connections out of the listing.
const maxConnEntriesPerContainer = 1 << 14

// connTable is the agent's account of connections and its counters.
type connTable struct {
	mu    sync.Mutex
	m     map[connKey]connEntry
	held  map[string]int // entries per container
	count agentapi.ConnCounters
}

// connPages keeps the list a CONNS from offset 0 made for the pages after
// it: making it reads every ledger and sorts (half a second for 65536
// connections), and a client asks for about 480 entries a page. Each
// admin session keeps its own, so that two clients paging at once each
// get their list whole, every entry once.
type connPages struct {
	list    []any
	listing uint8 // which list (LISTING)
	at      time.Time
}

// connPagesFresh is how long the pages after the first come from the list
// the first one made: a client asks for them at once.
const connPagesFresh = 5 * time.Second

// get returns the list listing for a page from offset: made afresh for
// offset 0 (or if it is older than connPagesFresh, or another list), else
// the one made last.
func (p *connPages) get(offset uint32, listing uint8, build func() []any) []any {
	if offset == 0 || listing != p.listing || time.Since(p.at) > connPagesFresh {
		p.list, p.listing, p.at = build(), listing, time.Now()
	}
	return p.list
}

// listing returns what makes the list a CONNS with LISTING listing pages
// through.
func (a *Agent) listing(listing uint8) (func() []any, error) {
	switch listing {
	case protocol.ListConns:
		return func() []any { return anys(a.connList()) }, nil
	case protocol.ListQPs:
		return func() []any { return anys(a.qpList()) }, nil
	case protocol.ListVerbsMem:
		return func() []any { return anys(a.verbsMemList()) }, nil
	}
	return nil, protocol.Errorf(protocol.CodeInvalid,
		"LISTING %d names no list; ask for 0 (connections), 1 (verbs queue pairs) or 2 (verbs memory per container)", listing)
}

// anys returns xs as a list of any.
func anys[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

func newConnTable() *connTable {
	return &connTable{m: map[connKey]connEntry{}, held: map[string]int{}, count: agentapi.ConnCounters{
		FallbackReasons: map[string]uint64{}, NotShmReasons: map[string]uint64{}}}
}

// add records an answered ask of container id's process pid; the entry
// takes over charge (nil for anything but shm).
func (t *connTable) add(id string, pid int32, local, remote netip.AddrPort, info agentapi.ConnInfo, charge *shmCharge) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := connKey{id, local, remote}
	if _, reused := t.m[k]; reused {
		// A reused 4-tuple: the earlier connection's CLOSED never came, or it
		// lives on (the swap freed its port) and its ledger entry lists it.
		t.deleteLocked(k)
	} else if t.held[id] >= maxConnEntriesPerContainer {
		t.evictLocked(id)
	}
	t.m[k] = connEntry{info: info, pid: pid, charge: charge}
	t.held[id]++
	switch info.Path {
	case "shm":
		t.count.FastPath++
		t.count.Shm++
	case "unix":
		t.count.FastPath++
		t.count.Unix++
		if info.Reason != "" {
			t.count.NotShmReasons[info.Reason]++
		}
	case "host-tcp":
		t.count.FastPath++
		t.count.HostTCP++
	default:
		t.count.Fallback++
		t.count.FallbackReasons[info.Reason]++
	}
}

// evictLocked drops one of container id's entries: an overlay one among
// the first evictScan of its entries met, else the first.
func (t *connTable) evictLocked(id string) {
	const evictScan = 1024
	var victim *connKey
	seen := 0
	for k, e := range t.m {
		if k.id != id {
			continue
		}
		if victim == nil || e.info.Path == "overlay" {
			victim = &k
		}
		if seen++; e.info.Path == "overlay" || seen >= evictScan {
			break
		}
	}
	if victim != nil {
		t.deleteLocked(*victim)
	}
}

// deleteLocked forgets an entry and releases its charge.
func (t *connTable) deleteLocked(k connKey) {
	e, ok := t.m[k]
	if !ok {
		return
	}
	e.charge.release()
	delete(t.m, k)
	if t.held[k.id]--; t.held[k.id] <= 0 {
		delete(t.held, k.id)
	}
}

// remove forgets a closed connection of container id (CLOSED).
func (t *connTable) remove(id string, local, remote netip.AddrPort) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.deleteLocked(connKey{id, local, remote})
}

// connsPage is the reply to CONNS: as many entries of the list its
// LISTING names (connections if absent) from its OFFSET on (0 if absent)
// as fit one message, and how many the list has (COUNT), so that a client
// asks again for the rest; pages are the asking session's. A reply to a
// LISTING other than connections says which it lists.
func (a *Agent) connsPage(m *protocol.Message, pages *connPages) (*protocol.Message, error) {
	offset, err := optionalU32(m, protocol.AttrOffset)
	if err != nil {
		return nil, err
	}
	var listing uint8
	if _, ok := m.Get(protocol.AttrListing); ok {
		if listing, err = m.U8(protocol.AttrListing); err != nil {
			return nil, err
		}
	}
	build, err := a.listing(listing)
	if err != nil {
		return nil, err
	}
	all := pages.get(offset, listing, build)
	page := []byte{'['}
	for i := int(offset); i < len(all); i++ {
		e, err := json.Marshal(all[i])
		if err != nil {
			return nil, protocol.Errorf(protocol.CodeInternal, "encode a list entry: %v", err)
		}
		if len(page)+len(e)+1 > maxConnsJSON {
			break
		}
		if len(page) > 1 {
			page = append(page, ',')
		}
		page = append(page, e...)
	}
	page = append(page, ']')
	reply := protocol.New(protocol.TypeOK, m.Seq, protocol.Attr{Type: protocol.AttrJSON, Value: page},
		protocol.U32(protocol.AttrCount, uint32(len(all))))
	if listing != protocol.ListConns {
		reply.Attrs = append(reply.Attrs, protocol.U8(protocol.AttrListing, listing))
	}
	return reply, nil
}

// optionalU32 returns the u32 attribute t of m, 0 if absent.
func optionalU32(m *protocol.Message, t protocol.AttrType) (uint32, error) {
	if _, ok := m.Get(t); !ok {
		return 0, nil
	}
	return m.U32(t)
}

// maxConnsJSON is the room for a CONNS page: a JSON attribute's limit.
const maxConnsJSON = 65000

// connList is the list CONNS pages through: the connections the agent
// answered and the live entries of the processes' ledgers (each end once),
// sorted.
func (a *Agent) connList() []agentapi.ConnInfo {
	a.settled() // a restarted agent finds its host's ledgers (ledgerscan.go)
	a.ledgers.prune()
	a.live.prune()
	out, ends := a.live.reconcile(a.ledgers.verify(a.ledgers.ends(""), 0))
	out = append(out, a.ledgerConns(ends)...)
	sortConns(out)
	return out
}

// ledgerCheckEvery is how often a budget check, which a container can
// provoke with every connection, may check a ledger's entries against
// the descriptors of its process (ledger.go, verify).
const ledgerCheckEvery = time.Second

// reconciled returns the live entries of the ledgers of container id ("":
// of every container) that the table does not list, each end once, after
// bringing the table in line with them. A library lists what the agent
// answered in its ledger too, so that a restarted agent finds it; until
// its CLOSED the table's entry, and its charge, stand for it, but the
// entry says what the end is now: the table's entry of an end whose
// process no longer holds it (verify, for ledgers checked minAge ago or
// more) goes, with its charge, and one the library moved down to a socket
// pair (or could not swap in) takes the entry's path and drops its shm
// charge. The ledgers are read before the table: an answer enters the
// table before its PATH is sent, hence before its ledger entry, and
// leaves it after (CLOSED follows the entry's close), so a live
// connection is in one of them at every moment.
func (a *Agent) reconciled(id string, minAge time.Duration) []ledgerEnd {
	_, ends := a.live.reconcile(a.ledgers.verify(a.ledgers.ends(id), minAge))
	return ends
}

// list prunes the entries whose process is gone and returns the others,
// sorted.
func (t *connTable) list() []agentapi.ConnInfo {
	t.prune()
	out := t.infos()
	sortConns(out)
	return out
}

// infos returns the table's entries.
func (t *connTable) infos() []agentapi.ConnInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.infosLocked()
}

func (t *connTable) infosLocked() []agentapi.ConnInfo {
	out := make([]agentapi.ConnInfo, 0, len(t.m))
	for _, e := range t.m {
		out = append(out, e.info)
	}
	return out
}

// reconcile applies live and dead ledger ends to the table (reconciled)
// and returns, at one moment, its entries and the live ends it has no
// entry for, each socket once. A table entry stands for one ledger end of
// its 4-tuple: a 4-tuple reused by a later connection while the first
// lives has two ends in the ledger, one answer in the table (the later).
func (t *connTable) reconcile(live, dead []ledgerEnd) ([]agentapi.ConnInfo, []ledgerEnd) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range dead {
		if te, ok := t.m[e.key()]; ok && te.pid == e.l.pid {
			t.deleteLocked(e.key())
		}
	}
	seen := map[sockKey]bool{}
	covered := map[connKey]bool{}
	out := live[:0]
	for _, e := range live {
		k := e.key()
		if e.sock != 0 && seen[sockKey{k, e.sock}] {
			continue // one socket held by two processes (a fork): one end
		}
		seen[sockKey{k, e.sock}] = true
		if te, ok := t.m[k]; ok && !covered[k] {
			covered[k] = true
			t.m[k] = te.follow(e)
		} else {
			out = append(out, e)
		}
	}
	return t.infosLocked(), out
}

// sockKey is an end and the socket that is it: two live connections can
// have one 4-tuple (the swap frees the overlay connection's port, which a
// later connection between the same two containers may get), and one
// socket can be in two processes' ledgers (a fork).
type sockKey struct {
	connKey
	sock uint64
}

// follow returns te saying what its end's ledger entry e says it is now.
func (te connEntry) follow(e ledgerEnd) connEntry {
	if path := pathName(e.path); path != te.info.Path {
		te.info.Path, te.info.Reason = path, e.reason
		if e.path != pathShm {
			te.charge.release()
			te.charge = nil
		}
	}
	return te
}

// lackingBytes returns the bytes of those of container id's entries es
// that the table has no entry for (one entry stands for one of its
// 4-tuple's, as in reconcile), locking the table once.
func (t *connTable) lackingBytes(id string, es []ledgerEntry) uint64 {
	var n uint64
	covered := map[connKey]bool{}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range es {
		k := connKey{id, e.local, e.remote}
		if _, ok := t.m[k]; ok && !covered[k] {
			covered[k] = true
		} else {
			n += uint64(e.bytes)
		}
	}
	return n
}

// sortConns sorts by local container, then local address, then remote.
func sortConns(cs []agentapi.ConnInfo) {
	slices.SortFunc(cs, func(a, b agentapi.ConnInfo) int {
		return cmp.Or(cmp.Compare(a.LocalContainer, b.LocalContainer), cmp.Compare(a.Local, b.Local), cmp.Compare(a.Remote, b.Remote))
	})
}

// counters returns a copy of the counters, with the live count current.
func (t *connTable) counters() agentapi.ConnCounters {
	t.prune()
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.count
	c.FallbackReasons = maps.Clone(t.count.FallbackReasons)
	c.NotShmReasons = maps.Clone(t.count.NotShmReasons)
	c.Live = len(t.m)
	return c
}

// prune drops entries whose process has exited: a library that crashed
// never says CLOSED, and overlay connections are not reported closed at
// all. Pids are checked once each, outside the lock.
func (t *connTable) prune() {
	t.mu.Lock()
	pids := map[int32]bool{}
	for _, e := range t.m {
		pids[e.pid] = true
	}
	t.mu.Unlock()
	for pid := range pids {
		pids[pid] = alive(pid)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, e := range t.m {
		if known, ok := pids[e.pid]; ok && !known {
			t.deleteLocked(k)
		}
	}
}

// alive reports whether process pid exists (as seen from the agent's pid
// namespace, where SO_PEERCRED reported it).
func alive(pid int32) bool {
	err := syscall.Kill(int(pid), 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
