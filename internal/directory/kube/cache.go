package kube

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/freeflow-net/freeflow/internal/directory"
)

// view is the agent's picture of the cluster, built from the informers'
// events: one container per pod that carries a valid record.
type view struct {
	mu    sync.RWMutex
	pods  map[string]directory.Container // by pod, namespace/name
	byIP  map[string]string              // container IP -> pod
	byID  map[string]string              // container id -> pod
	hosts map[string]directory.Host      // by node name
	bad   map[string]string              // pod -> resourceVersion whose record was reported invalid
	seen  atomic.Uint64                  // pod events applied, resyncs included
}

func newView() *view {
	return &view{
		pods: map[string]directory.Container{}, byIP: map[string]string{}, byID: map[string]string{},
		hosts: map[string]directory.Host{}, bad: map[string]string{},
	}
}

func (v *view) putPod(pod string, c directory.Container) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.remove(pod)
	v.pods[pod] = c
	v.byIP[c.IP] = pod
	v.byID[c.ID] = pod
}

func (v *view) removePod(pod string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.remove(pod)
}

// deletedPod forgets a deleted pod, its reported bad record included.
func (v *view) deletedPod(pod string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.remove(pod)
	delete(v.bad, pod)
}

// remove drops pod's container. Indexes are cleared only where they still
// point at this pod, so an IP already taken over by a newer pod (an IP
// reused while the old pod's deletion is still on its way) keeps pointing
// there.
func (v *view) remove(pod string) {
	c, ok := v.pods[pod]
	if !ok {
		return
	}
	delete(v.pods, pod)
	if v.byIP[c.IP] == pod {
		delete(v.byIP, c.IP)
	}
	if v.byID[c.ID] == pod {
		delete(v.byID, c.ID)
	}
}

func (v *view) putHost(h directory.Host) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.hosts[h.Name] = h
}

func (v *view) removeHost(name string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.hosts, name)
}

// noteBad records that pod's record at resourceVersion rv is invalid and
// reports whether that is news, so that a bad record is logged once, not
// on every resync.
func (v *view) noteBad(pod, rv string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if old, seen := v.bad[pod]; seen && old == rv {
		return false
	}
	v.bad[pod] = rv
	return true
}

// podEvents returns how many pod events the view has applied.
func (v *view) podEvents() uint64 { return v.seen.Load() }

// podOf returns the pod whose record has container id.
func (v *view) podOf(id string) (string, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	pod, ok := v.byID[id]
	return pod, ok
}

// Reads come only from the cache: they never wait for the API server, and
// while it is unreachable they return the last known view (see Health).

// LookupIP returns the container that owns overlay address ip.
func (d *Directory) LookupIP(ip string) (directory.Container, bool) {
	v := d.cache
	v.mu.RLock()
	defer v.mu.RUnlock()
	c, ok := v.pods[v.byIP[ip]]
	return c, ok
}

// Containers returns every container, sorted by name (namespace/name).
func (d *Directory) Containers() []directory.Container {
	v := d.cache
	v.mu.RLock()
	defer v.mu.RUnlock()
	return slices.SortedFunc(maps.Values(v.pods), func(a, b directory.Container) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
}

// HostsSynced reports whether Hosts holds every Node: the Nodes have been
// listed once. Before, a missing host is unknown, not gone.
func (d *Directory) HostsSynced() bool { return d.nodes.HasSynced() }

// Hosts returns every node that has an InternalIP, sorted by name.
func (d *Directory) Hosts() []directory.Host {
	v := d.cache
	v.mu.RLock()
	defer v.mu.RUnlock()
	return slices.SortedFunc(maps.Values(v.hosts), func(a, b directory.Host) int { return cmp.Compare(a.Name, b.Name) })
}
