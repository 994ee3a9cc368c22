package etcd

import (
	"cmp"
	"maps"
	"slices"

	"github.com/freeflow-net/freeflow/internal/directory"
)

// Reads come only from the cache: they never wait for etcd, and while etcd
// is unreachable they return its last known view (see Health).

// LookupIP returns the container that owns overlay address ip.
func (d *Directory) LookupIP(ip string) (directory.Container, bool) {
	d.cache.mu.RLock()
	defer d.cache.mu.RUnlock()
	c, ok := d.cache.v.containers[d.cache.v.byIP[ip]]
	return c, ok
}

// Container returns the container with id.
func (d *Directory) Container(id string) (directory.Container, bool) {
	d.cache.mu.RLock()
	defer d.cache.mu.RUnlock()
	c, ok := d.cache.v.containers[id]
	return c, ok
}

// ContainerByName returns the container called name.
func (d *Directory) ContainerByName(name string) (directory.Container, bool) {
	d.cache.mu.RLock()
	defer d.cache.mu.RUnlock()
	c, ok := d.cache.v.containers[d.cache.v.byName[name]]
	return c, ok
}

// Containers returns every container, sorted by name (then id).
func (d *Directory) Containers() []directory.Container {
	d.cache.mu.RLock()
	defer d.cache.mu.RUnlock()
	return sortedValues(d.cache.v.containers, func(a, b directory.Container) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
}

// Hosts returns every host, sorted by name.
func (d *Directory) Hosts() []directory.Host {
	d.cache.mu.RLock()
	defer d.cache.mu.RUnlock()
	return sortedValues(d.cache.v.hosts, func(a, b directory.Host) int { return cmp.Compare(a.Name, b.Name) })
}

// sortedValues returns a copy of m's values (never nil, so an empty
// listing encodes as []), sorted by compare.
func sortedValues[V any](m map[string]V, compare func(a, b V) int) []V {
	out := slices.AppendSeq(make([]V, 0, len(m)), maps.Values(m))
	slices.SortFunc(out, compare)
	return out
}
