package agent

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/policy"
)

// refreshEvery is how often the agent re-reads the policy and settings
// documents: a change reaches every agent within it. The key is read once.
const refreshEvery = 2 * time.Second

// keepClusterData loads the cluster key (creating it if this is the
// cluster's first agent to ask) and keeps the policy and settings current
// until ctx ends. While the directory is unreachable the last good policy
// and settings stay in force; without a key, cross-host offers fall back
// (no-cluster-key); until the settings are first read, same-host fast
// paths are unix (no-cluster-settings).
func (a *Agent) keepClusterData(ctx context.Context) {
	defer a.wg.Done()
	var keyErr string
	pol := clusterDoc[policy.Policy]{what: "policy", read: a.dir.Policy, parse: policy.Parse, cur: &a.pol}
	set := clusterDoc[directory.Settings]{what: "settings", read: a.dir.Settings, parse: directory.ParseSettings, cur: &a.set}
	for {
		if a.key.Load() == nil {
			if k, err := a.dir.ClusterKey(ctx); err == nil {
				a.key.Store(&k)
			} else if err.Error() != keyErr {
				keyErr = err.Error()
				a.log.Warn("read the cluster key; cross-host fast paths wait for it", "err", err)
			}
		}
		pol.refresh(ctx, a.log)
		set.refresh(ctx, a.log)
		wait := refreshEvery
		if a.key.Load() == nil || a.set.Load() == nil {
			wait = 200 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// clusterDoc is one document of the cluster's data (policy, settings)
// kept in force in cur: the last valid version read.
type clusterDoc[T any] struct {
	what    string
	read    func(context.Context) ([]byte, error)
	parse   func([]byte) (T, error)
	cur     *atomic.Pointer[T]
	lastErr string // logged once, until the document is valid again
}

// refresh reads and parses the document. An unreachable directory keeps
// the last good version (directory health reports the outage); an
// invalid document keeps it too, and is logged.
func (d *clusterDoc[T]) refresh(ctx context.Context, log *slog.Logger) {
	doc, err := d.read(ctx)
	if err != nil {
		d.lastErr = ""
		return
	}
	v, err := d.parse(doc)
	if err != nil {
		if err.Error() != d.lastErr {
			log.Warn("the cluster "+d.what+" document is invalid; keeping the previous "+d.what, "err", err)
		}
		d.lastErr = err.Error()
		return
	}
	d.lastErr = ""
	d.cur.Store(&v)
}

// settings returns the cluster settings in force, and false until they
// have been read once.
func (a *Agent) settings() (directory.Settings, bool) {
	if s := a.set.Load(); s != nil {
		return *s, true
	}
	return directory.Settings{}, false
}

// clusterKey returns the broker key, or nil while it is not known.
func (a *Agent) clusterKey() []byte {
	if k := a.key.Load(); k != nil {
		return *k
	}
	return nil
}

// policy returns the policy in force (the default until one is read).
func (a *Agent) policy() policy.Policy {
	if p := a.pol.Load(); p != nil {
		return *p
	}
	return policy.Policy{}
}
