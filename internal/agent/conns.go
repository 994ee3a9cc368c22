package agent

import (
	"cmp"
	"errors"
	"net/netip"
	"slices"
	"sync"
	"syscall"
)

// ConnInfo is one live connection an agent answered CONNECT or ACCEPT
// for, as `freeflow conns -o json` prints it.
type ConnInfo struct {
	Local           string `json:"local"`            // overlay address of this end
	Remote          string `json:"remote"`           // overlay address of the peer
	LocalContainer  string `json:"local_container"`  // name of this end's container
	RemoteContainer string `json:"remote_container"` // the peer's container; "" if it is none
	Path            string `json:"path"`             // overlay, unix or host-tcp
	Reason          string `json:"reason"`           // why overlay; "" for a fast path
}

// ConnCounters counts the connection ends this agent answered since it
// started (a same-host connection has two ends here, a cross-host one has
// one on each agent). Bytes are not counted: after the swap the data never
// passes through the agent, and it keeps no reference to the channels
// (one would keep a peer from seeing EOF).
type ConnCounters struct {
	FastPath        uint64            `json:"fast_path"`
	Unix            uint64            `json:"unix"`
	HostTCP         uint64            `json:"host_tcp"`
	Fallback        uint64            `json:"fallback"`
	FallbackReasons map[string]uint64 `json:"fallback_reasons"`
	Live            int               `json:"live"`
}

type connKey struct {
	id            string
	local, remote netip.AddrPort
}

type connEntry struct {
	info ConnInfo
	pid  int32 // the library process that asked; the entry goes when it does
}

// maxConnEntries bounds the table: overlay connections of a process that lives
// on are never reported closed, so without a bound a long-running server
// would grow it forever. Beyond it an arbitrary overlay entry makes room.
const maxConnEntries = 1 << 16

// connTable is the agent's account of connections and its counters.
type connTable struct {
	mu    sync.Mutex
	m     map[connKey]connEntry
	count ConnCounters
}

func newConnTable() *connTable {
	return &connTable{m: map[connKey]connEntry{}, count: ConnCounters{FallbackReasons: map[string]uint64{}}}
}

// add records an answered ask of container id's process pid.
func (t *connTable) add(id string, pid int32, local, remote netip.AddrPort, info ConnInfo) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.m) >= maxConnEntries {
		t.evictLocked()
	}
	t.m[connKey{id, local, remote}] = connEntry{info: info, pid: pid}
	switch info.Path {
	case "unix":
		t.count.FastPath++
		t.count.Unix++
	case "host-tcp":
		t.count.FastPath++
		t.count.HostTCP++
	default:
		t.count.Fallback++
		t.count.FallbackReasons[info.Reason]++
	}
}

// evictLocked drops one overlay entry, or any entry if all are fast.
func (t *connTable) evictLocked() {
	var victim *connKey
	for k, e := range t.m {
		victim = &k
		if e.info.Path == "overlay" {
			break
		}
	}
	if victim != nil {
		delete(t.m, *victim)
	}
}

// remove forgets a closed connection of container id (CLOSED).
func (t *connTable) remove(id string, local, remote netip.AddrPort) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, connKey{id, local, remote})
}

// list prunes the entries whose process is gone and returns the others,
// sorted by local container, then local address.
func (t *connTable) list() []ConnInfo {
	t.prune()
	t.mu.Lock()
	out := make([]ConnInfo, 0, len(t.m))
	for _, e := range t.m {
		out = append(out, e.info)
	}
	t.mu.Unlock()
	slices.SortFunc(out, func(a, b ConnInfo) int {
		return cmp.Or(cmp.Compare(a.LocalContainer, b.LocalContainer), cmp.Compare(a.Local, b.Local), cmp.Compare(a.Remote, b.Remote))
	})
	return out
}

// counters returns a copy of the counters, with the live count current.
func (t *connTable) counters() ConnCounters {
	t.prune()
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.count
	c.FallbackReasons = make(map[string]uint64, len(t.count.FallbackReasons))
	for k, v := range t.count.FallbackReasons {
		c.FallbackReasons[k] = v
	}
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
			delete(t.m, k)
		}
	}
}

// alive reports whether process pid exists (as seen from the agent's pid
// namespace, where SO_PEERCRED reported it).
func alive(pid int32) bool {
	err := syscall.Kill(int(pid), 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
