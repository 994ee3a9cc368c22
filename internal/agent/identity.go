package agent

import (
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/freeflow-net/freeflow/internal/directory"
)

// nsKey identifies a network namespace: the device and inode of its nsfs
// file, the same whether reached through /proc/<pid>/ns/net or a bind
// mount such as /run/netns/<name>.
type nsKey struct{ dev, ino uint64 }

const (
	nsGetNSType = 0xb703     // ioctl NS_GET_NSTYPE
	cloneNewNet = 0x40000000 // CLONE_NEWNET
)

// nsOfPath returns the namespace key of a namespace file.
func nsOfPath(path string) (nsKey, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nsKey{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nsKey{}, fmt.Errorf("stat %s: no device and inode", path)
	}
	return nsKey{dev: st.Dev, ino: st.Ino}, nil
}

// nsOfPid returns the network namespace of pid.
func nsOfPid(pid int32) (nsKey, error) {
	return nsOfPath(fmt.Sprintf("/proc/%d/ns/net", pid))
}

// netNSKey checks that path is a network namespace file (not just any
// file, nor another kind of namespace) and returns its key.
func netNSKey(path string) (nsKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nsKey{}, err
	}
	defer f.Close()
	t, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), nsGetNSType, 0)
	if errno != 0 {
		return nsKey{}, fmt.Errorf("%s is not a namespace file: %w", path, errno)
	}
	if t != cloneNewNet {
		return nsKey{}, fmt.Errorf("%s is a namespace, but not a network namespace", path)
	}
	return nsOfPath(path)
}

// identities maps the network namespace of every registered local
// container to its record.
type identities struct {
	mu     sync.Mutex
	byNS   map[nsKey]directory.Container
	nsByID map[string]nsKey
	// refresh is held through a refresh, so that two do not add one
	// container twice; not through the scan for the ledgers of the
	// containers it adds, which reads /proc of their processes and must
	// not hold up every caller the agent does not recognise.
	refresh sync.Mutex
	// scans is read-held by each such scan, taken before refresh is let
	// go: a listing waits for the scans under way (settled), or a
	// container added by another caller's refresh a moment before would
	// be listed without its ledgers.
	scans sync.RWMutex
}

func newIdentities() *identities {
	return &identities{byNS: map[nsKey]directory.Container{}, nsByID: map[string]nsKey{}}
}

func (s *identities) put(c directory.Container, k nsKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.nsByID[c.ID]; ok {
		delete(s.byNS, old)
	}
	s.byNS[k] = c
	s.nsByID[c.ID] = k
}

func (s *identities) remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, ok := s.nsByID[id]; ok {
		delete(s.byNS, k)
		delete(s.nsByID, id)
	}
}

func (s *identities) byNamespace(k nsKey) (directory.Container, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.byNS[k]
	return c, ok
}

// holder returns the id of the container registered with namespace k.
func (s *identities) holder(k nsKey) (string, bool) {
	c, ok := s.byNamespace(k)
	return c.ID, ok
}

// local returns the registered local container id and the key of its
// network namespace.
func (s *identities) local(id string) (directory.Container, nsKey, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.nsByID[id]
	return s.byNS[k], k, ok
}

// count returns how many containers are registered.
func (s *identities) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byNS)
}

func (s *identities) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.nsByID[id]
	return ok
}

// refreshIdentities adds every container of this host that the directory
// knows and whose namespace still exists, and maps the ledgers of the
// processes of those it adds (ledgerscan.go). It only adds: the directory
// cache may not yet hold a registration this agent just wrote, and removals
// come through UNREGISTER. A restarted agent calls it on start, on every
// caller it does not recognise and before it lists or counts connections,
// since its directory cache fills asynchronously.
func (a *Agent) refreshIdentities() {
	added := a.addIdentities()
	defer a.ids.scans.RUnlock()
	a.scanLedgers(added)
}

// settled is refreshIdentities for a listing: it returns once every
// ledger scan under way, this caller's or another's, is done.
func (a *Agent) settled() {
	a.refreshIdentities()
	a.ids.scans.Lock()
	a.ids.scans.Unlock()
}

// addIdentities adds the local containers of the directory that the agent
// does not know (refreshIdentities), and returns them, with ids.scans
// read-held for their scan.
func (a *Agent) addIdentities() map[nsKey]directory.Container {
	a.ids.refresh.Lock()
	defer a.ids.refresh.Unlock()
	a.ids.scans.RLock()
	added := map[nsKey]directory.Container{}
	for _, c := range a.dir.Containers() {
		if c.Host != a.cfg.Host || a.ids.has(c.ID) {
			continue
		}
		if err := validRecord(c); err != nil {
			a.log.Warn("directory lists a local container the agent cannot serve", "id", c.ID, "err", err)
			continue
		}
		k, err := netNSKey(c.NetNS)
		if err != nil {
			a.log.Debug("directory lists a local container whose namespace is gone", "id", c.ID, "netns", c.NetNS, "err", err)
			continue
		}
		if other, taken := a.ids.holder(k); taken {
			a.log.Warn("directory lists two local containers in one namespace; keeping the first", "kept", other, "ignored", c.ID)
			continue
		}
		a.ids.put(c, k)
		added[k] = c
	}
	return added
}

// identify returns the registered local container whose network namespace
// is k.
func (a *Agent) identify(k nsKey) (directory.Container, bool) {
	if c, ok := a.ids.byNamespace(k); ok {
		return c, true
	}
	a.refreshIdentities()
	return a.ids.byNamespace(k)
}
