package cluster

import (
	"context"
	"fmt"
	"slices"

	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/state"
)

// repair brings back what died in a cluster that is up: a managed etcd and
// agents whose processes are gone are started again, on the state they left
// (etcd's data directory, the directory's records). What runs is left
// alone: live agents, containers and their connections. Repairing a whole
// cluster changes nothing, so `cluster up` can be repeated. What cannot be
// repaired this way (a half-built cluster, a lost namespace, other flags)
// is refused with the way out. The caller holds the lock.
func repair(ctx context.Context, l state.Layout, opts Options) (*state.Cluster, error) {
	c, err := l.LoadCluster()
	if err != nil {
		return nil, refuse(l, "its state cannot be read ("+err.Error()+")")
	}
	if err := repairable(l, c, opts); err != nil {
		return nil, err
	}
	progress := opts.Progress
	if progress == nil {
		progress = func(string, ...any) {}
	}
	etcdPID := c.Etcd.PID
	if err := bringUpEtcd(ctx, l, c); err != nil {
		return nil, err
	}
	if c.Etcd.PID != etcdPID {
		progress("directory: etcd was not running; restarted (pid %d)", c.Etcd.PID)
	}
	if c.NoAgents {
		progress("directory answers; no agents (--no-agents)")
		return c, nil
	}
	agentPIDs := make([]int, len(c.Hosts))
	for i, h := range c.Hosts {
		agentPIDs[i] = h.AgentPID
	}
	if err := bringUpAgents(ctx, l, c, opts.BinDir); err != nil {
		return nil, err
	}
	for i, h := range c.Hosts {
		if h.AgentPID != agentPIDs[i] {
			progress("agent on %s was not running; restarted (pid %d)", h.Name, h.AgentPID)
		}
	}
	progress("directory and %d agents answer", len(c.Hosts))
	return c, nil
}

// repairable checks that c is a built cluster of the shape opts asks for
// whose namespaces all exist.
func repairable(l state.Layout, c *state.Cluster, opts Options) error {
	if c.Phase != state.PhaseUp {
		return refuse(l, fmt.Sprintf("its `cluster up` did not finish (phase %q)", c.Phase))
	}
	if len(c.Hosts) != opts.Hosts {
		return refuse(l, fmt.Sprintf("it has %d hosts, not %d", len(c.Hosts), opts.Hosts))
	}
	if c.NoAgents != opts.NoAgents {
		return refuse(l, fmt.Sprintf("it was made with no-agents %v, not %v", c.NoAgents, opts.NoAgents))
	}
	managed := len(opts.Etcd) == 0
	if managed != c.Etcd.Managed || (!managed && !slices.Equal(opts.Etcd, c.Etcd.Endpoints)) {
		return refuse(l, fmt.Sprintf("its directory is %v (managed: %v), not the one asked for", c.Etcd.Endpoints, c.Etcd.Managed))
	}
	names := []string{l.FabricNetNS()}
	for _, h := range c.Hosts {
		names = append(names, l.HostNetNS(h.Name))
	}
	for _, ns := range names {
		if !netns.Exists(ns) {
			return refuse(l, "its network namespace "+ns+" is gone")
		}
	}
	return nil
}

// refuse says why an existing cluster cannot be repaired and what to do.
func refuse(l state.Layout, why string) error {
	return fmt.Errorf("cluster %q: %w and `cluster up` cannot repair it: %s; run `freeflow --cluster %s cluster down` first",
		l.Cluster, ErrExists, why, l.Cluster)
}
