package directory

import (
	"cmp"
	"slices"
)

// Reads come only from the cache: they never wait for etcd, and while etcd
// is unreachable they return its last known view (see Health).

// LookupIP returns the container that owns overlay address ip.
func (d *Directory) LookupIP(ip string) (Container, bool) {
	d.cache.mu.RLock()
	defer d.cache.mu.RUnlock()
	c, ok := d.cache.v.containers[d.cache.v.byIP[ip]]
	return c, ok
}

// Container returns the container with id.
func (d *Directory) Container(id string) (Container, bool) {
	d.cache.mu.RLock()
	defer d.cache.mu.RUnlock()
	c, ok := d.cache.v.containers[id]
	return c, ok
}

// ContainerByName returns the container called name.
func (d *Directory) ContainerByName(name string) (Container, bool) {
	d.cache.mu.RLock()
	defer d.cache.mu.RUnlock()
	c, ok := d.cache.v.containers[d.cache.v.byName[name]]
	return c, ok
}

// Containers returns every container, sorted by name (then id).
func (d *Directory) Containers() []Container {
	d.cache.mu.RLock()
	out := make([]Container, 0, len(d.cache.v.containers))
	for _, c := range d.cache.v.containers {
		out = append(out, c)
	}
	d.cache.mu.RUnlock()
	slices.SortFunc(out, func(a, b Container) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// Hosts returns every host, sorted by name.
func (d *Directory) Hosts() []Host {
	d.cache.mu.RLock()
	out := make([]Host, 0, len(d.cache.v.hosts))
	for _, h := range d.cache.v.hosts {
		out = append(out, h)
	}
	d.cache.mu.RUnlock()
	slices.SortFunc(out, func(a, b Host) int { return cmp.Compare(a.Name, b.Name) })
	return out
}
