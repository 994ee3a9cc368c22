package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/etcdproc"
	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/overlay"
	"github.com/freeflow-net/freeflow/internal/state"
)

// Options says what `cluster up` builds.
type Options struct {
	Hosts int
	// Etcd lists external etcd client URLs; empty means start a managed
	// single-node etcd in the fabric namespace. External URLs are dialed
	// from the network namespace the CLI runs in (see startAgent).
	Etcd []string
	// BinDir holds freeflowd (normally the directory of the freeflow binary).
	BinDir string
	// Settings are stored in the directory for the agents (shm off, budget).
	Settings directory.Settings
	// NoAgents starts no freeflowd: the hosts, overlay and etcd only, for
	// agents run by something else (FreeFlow's DaemonSet on a Kubernetes
	// cluster on the hosts, see internal/kubelab).
	NoAgents bool
	// Progress, if set, is told about each part as it comes up.
	Progress func(format string, args ...any)
}

// ErrExists is returned by Up when something of the cluster already exists
// that it cannot repair.
var ErrExists = errors.New("cluster already exists")

// Up builds the cluster and returns its state. On failure it tears down
// everything it made, so a failed `up` leaves nothing behind. A cluster that
// is already up is repaired instead (see repair).
func Up(ctx context.Context, l state.Layout, opts Options) (*state.Cluster, error) {
	if opts.Hosts < 1 || opts.Hosts > state.MaxHosts {
		return nil, fmt.Errorf("--hosts %d: need 1 to %d hosts", opts.Hosts, state.MaxHosts)
	}
	unlock, err := l.Lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := checkAbsent(l); errors.Is(err, ErrExists) {
		return repair(ctx, l, opts)
	} else if err != nil {
		return nil, err
	}
	c := newState(l, opts)
	if err := build(ctx, l, c, opts); err != nil {
		if terr := teardown(l); terr != nil {
			err = fmt.Errorf("%w (and cleaning up failed: %v)", err, terr)
		}
		return nil, err
	}
	return c, nil
}

// checkAbsent fails if any part of the cluster exists: its state file or
// any of its namespaces (the lock file alone is not a cluster).
func checkAbsent(l state.Layout) error {
	_, err := os.Stat(l.StateFile())
	names, lerr := netns.List(nsPrefix(l))
	if lerr != nil {
		return lerr
	}
	if err == nil || len(names) > 0 {
		return fmt.Errorf("cluster %q: %w; run `freeflow --cluster %s cluster down` first", l.Cluster, ErrExists, l.Cluster)
	}
	return nil
}

func newState(l state.Layout, opts Options) *state.Cluster {
	c := &state.Cluster{Name: l.Cluster, Phase: state.PhaseCreating, Created: time.Now().UTC().Format(time.RFC3339)}
	for i := 1; i <= opts.Hosts; i++ {
		c.Hosts = append(c.Hosts, state.NewHost(i))
	}
	c.NoAgents = opts.NoAgents
	c.Etcd = state.Etcd{Endpoints: opts.Etcd}
	if len(opts.Etcd) == 0 {
		c.Etcd = state.Etcd{Endpoints: []string{ManagedEtcdURL}, Managed: true}
	}
	return c
}

// build creates the parts in order, saving cluster.json first (phase
// creating) and after every part that has a pid, so `down` and `status`
// always see what exists.
func build(ctx context.Context, l state.Layout, c *state.Cluster, opts Options) error {
	progress := opts.Progress
	if progress == nil {
		progress = func(string, ...any) {}
	}
	if err := l.SaveCluster(c); err != nil {
		return err
	}
	if err := buildNetwork(l, c); err != nil {
		return err
	}
	progress("network: fabric, %d host namespaces, VXLAN overlay", len(c.Hosts))
	if err := bringUpEtcd(ctx, l, c); err != nil {
		return err
	}
	if err := putSettings(ctx, l, c, opts.Settings); err != nil {
		return err
	}
	progress("directory: etcd at %v", c.Etcd.Endpoints)
	if c.NoAgents {
		progress("agents: none (--no-agents)")
	} else {
		if err := bringUpAgents(ctx, l, c, opts.BinDir); err != nil {
			return err
		}
		progress("agents: %d running", len(c.Hosts))
	}
	c.Phase = state.PhaseUp
	return l.SaveCluster(c)
}

func buildNetwork(l state.Layout, c *state.Cluster) error {
	if err := overlay.CreateFabric(l); err != nil {
		return err
	}
	for _, h := range c.Hosts {
		if err := overlay.AttachHost(l, h); err != nil {
			return err
		}
	}
	for _, h := range c.Hosts {
		if err := overlay.SetupHost(l, h, c.Hosts); err != nil {
			return err
		}
	}
	return nil
}

// bringUpEtcd starts the managed etcd unless it runs (on its data
// directory, so a restarted member has all it had) and waits until it is
// healthy; an external etcd is only waited for.
func bringUpEtcd(ctx context.Context, l state.Layout, c *state.Cluster) error {
	ctx, cancel := context.WithTimeout(ctx, etcdTimeout)
	defer cancel()
	if !c.Etcd.Managed {
		// Agents dial an external etcd from the CLI's namespace, so check it here.
		hint := "check that --etcd names a running etcd reachable from where freeflow runs"
		return waitEtcd(ctx, "", c.Etcd.Endpoints[0], 0, hint)
	}
	if !runs(c.Etcd.PID, etcdproc.Binary) {
		if err := os.MkdirAll(l.EtcdDir(), 0o700); err != nil {
			return fmt.Errorf("create etcd data directory: %w", err)
		}
		pid, _, err := startEtcd(l)
		if err != nil {
			return err
		}
		c.Etcd.PID = pid
		if err := l.SaveCluster(c); err != nil {
			return err
		}
	}
	return waitEtcd(ctx, l.FabricNetNS(), ManagedEtcdURL, c.Etcd.PID, "see "+etcdLog(l))
}

// bringUpAgents starts every agent that does not run first and then waits
// for all of them, so their start-up overlaps.
func bringUpAgents(ctx context.Context, l state.Layout, c *state.Cluster, binDir string) error {
	if _, err := os.Stat(filepath.Join(binDir, AgentBinary)); err != nil {
		return fmt.Errorf("agent binary: %w (build it with `make` or `go build -o bin/ ./cmd/...`)", err)
	}
	for i := range c.Hosts {
		if runs(c.Hosts[i].AgentPID, AgentBinary) {
			continue
		}
		pid, err := startAgent(l, binDir, c.Hosts[i], c.Etcd)
		if err != nil {
			return err
		}
		c.Hosts[i].AgentPID = pid
	}
	if err := l.SaveCluster(c); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	for _, h := range c.Hosts {
		if err := waitAgent(ctx, l, h.Name, h.AgentPID); err != nil {
			return err
		}
	}
	return nil
}
