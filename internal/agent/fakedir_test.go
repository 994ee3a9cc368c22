package agent

import (
	"context"
	"crypto/rand"
	"errors"
	"sort"
	"sync"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
)

// fakeDir is an in-memory Directory. Unlike etcd it applies writes to its
// cache at once.
type fakeDir struct {
	mu         sync.Mutex
	containers map[string]directory.Container
	hosts      map[string]directory.Host
	failWrites bool
	panicIP    string // LookupIP of this IP panics, to test recovery
	key        []byte // the cluster key; nil until first asked for
	policy     []byte
	settings   []byte
	// stampTenant, if set, is the tenant PutContainer stores, as the
	// Kubernetes datastore stores the pod's.
	stampTenant string
}

func newFakeDir(cs ...directory.Container) *fakeDir {
	d := &fakeDir{containers: map[string]directory.Container{}, hosts: map[string]directory.Host{}}
	for _, c := range cs {
		d.containers[c.ID] = c
	}
	return d
}

var errEtcdDown = errors.New("etcd at http://127.0.0.1:1 is unreachable")

func (d *fakeDir) PutContainer(_ context.Context, c directory.Container) (directory.Container, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failWrites {
		return c, errEtcdDown
	}
	if d.stampTenant != "" {
		c.Tenant = d.stampTenant
	}
	d.containers[c.ID] = c
	return c, nil
}

func (d *fakeDir) DeleteContainer(_ context.Context, id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failWrites {
		return errEtcdDown
	}
	delete(d.containers, id)
	return nil
}

func (d *fakeDir) PutHost(_ context.Context, h directory.Host) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failWrites {
		return errEtcdDown
	}
	d.hosts[h.Name] = h
	return nil
}

func (d *fakeDir) LookupIP(ip string) (directory.Container, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ip == d.panicIP {
		panic("fake directory: LookupIP of " + ip)
	}
	for _, c := range d.containers {
		if c.IP == ip {
			return c, true
		}
	}
	return directory.Container{}, false
}

func (d *fakeDir) Containers() []directory.Container {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []directory.Container
	for _, c := range d.containers {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (d *fakeDir) Hosts() []directory.Host {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []directory.Host
	for _, h := range d.hosts {
		out = append(out, h)
	}
	return out
}

func (d *fakeDir) ClusterKey(context.Context) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failWrites {
		return nil, errEtcdDown
	}
	if d.key == nil {
		d.key = make([]byte, directory.ClusterKeySize)
		rand.Read(d.key)
	}
	return d.key, nil
}

func (d *fakeDir) Policy(context.Context) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failWrites {
		return nil, errEtcdDown
	}
	return d.policy, nil
}

func (d *fakeDir) Settings(context.Context) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failWrites {
		return nil, errEtcdDown
	}
	return d.settings, nil
}

func (d *fakeDir) setSettings(doc string) {
	d.mu.Lock()
	d.settings = []byte(doc)
	d.mu.Unlock()
}

func (d *fakeDir) setPolicy(doc string) {
	d.mu.Lock()
	d.policy = []byte(doc)
	d.mu.Unlock()
}

func (d *fakeDir) putContainer(c directory.Container) {
	d.mu.Lock()
	d.containers[c.ID] = c
	d.mu.Unlock()
}

func (d *fakeDir) Health() directory.Health {
	return directory.Health{Connected: true, Revision: 42, LastSync: time.Unix(1700000000, 0)}
}

func (d *fakeDir) host(name string) (directory.Host, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.hosts[name]
	return h, ok
}

func (d *fakeDir) setFailWrites(v bool) {
	d.mu.Lock()
	d.failWrites = v
	d.mu.Unlock()
}
