package agent

import (
	"context"
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
	var keyErr, policyErr, settingsErr string
	for {
		if a.key.Load() == nil {
			if k, err := a.dir.ClusterKey(ctx); err == nil {
				a.key.Store(&k)
			} else if err.Error() != keyErr {
				keyErr = err.Error()
				a.log.Warn("read the cluster key; cross-host fast paths wait for it", "err", err)
			}
		}
		switch err := a.refreshPolicy(ctx); {
		case err == nil:
			policyErr = ""
		case err.Error() != policyErr:
			policyErr = err.Error()
			a.log.Warn("the cluster policy document is invalid; keeping the previous policy", "err", err)
		}
		switch err := a.refreshSettings(ctx); {
		case err == nil:
			settingsErr = ""
		case err.Error() != settingsErr:
			settingsErr = err.Error()
			a.log.Warn("the cluster settings document is invalid; keeping the previous settings", "err", err)
		}
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

// refreshPolicy reads the policy document; it returns an error only for
// an invalid document. An unreachable directory keeps the last good
// policy (directory health reports the outage).
func (a *Agent) refreshPolicy(ctx context.Context) error {
	doc, err := a.dir.Policy(ctx)
	if err != nil {
		return nil
	}
	p, err := policy.Parse(doc)
	if err != nil {
		return err
	}
	a.pol.Store(&p)
	return nil
}

// refreshSettings reads the settings document, as refreshPolicy the
// policy.
func (a *Agent) refreshSettings(ctx context.Context) error {
	doc, err := a.dir.Settings(ctx)
	if err != nil {
		return nil
	}
	s, err := directory.ParseSettings(doc)
	if err != nil {
		return err
	}
	a.set.Store(&s)
	return nil
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
