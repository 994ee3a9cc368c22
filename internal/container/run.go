package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/freeflow-net/freeflow/internal/cni"
	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/state"
)

// RunOptions describes a container to start.
type RunOptions struct {
	Name     string
	Host     string
	Tenant   string   // cni.DefaultTenant when empty
	FreeFlow bool     // the container runs with libfreeflow
	NoShm    bool     // its same-host fast paths are never shared memory
	NoRDMA   bool     // no virtual verbs device (a FreeFlow container has one otherwise)
	Detach   bool     // return once it runs; output goes to LogFile
	Remove   bool     // remove a foreground container when it exits
	Env      []string // K=V added to the base environment
	Volumes  []Volume // host paths bound into the container
	Args     []string
}

// Run creates and starts a container. Detached, it returns once the
// container runs; in the foreground it returns the container's exit code.
func (m *Manager) Run(ctx context.Context, o RunOptions) (int, error) {
	if len(o.Args) == 0 {
		return 0, errors.New("no command to run: give it after --")
	}
	unlock, err := m.lock()
	if err != nil {
		return 0, err
	}
	c, err := m.create(ctx, o)
	if err != nil || o.Detach {
		if err == nil {
			err = m.startDetached(ctx, c)
		}
		unlock()
		return 0, err
	}
	// A foreground container may run for long: never hold the lock meanwhile.
	unlock()
	return m.runForeground(ctx, c, o.Remove)
}

// create checks the request, then makes the container's network namespace,
// attaches it through CNI, updates the hosts file and writes the bundle.
// On failure it removes everything it made.
func (m *Manager) create(ctx context.Context, o RunOptions) (_ *state.Container, err error) {
	host, err := m.validate(o)
	if err != nil {
		return nil, err
	}
	if o.Tenant == "" {
		o.Tenant = cni.DefaultTenant
	}
	lib, provider := "", ""
	if o.FreeFlow {
		if lib, err = m.checkLibrary(); err != nil {
			return nil, err
		}
		if !o.NoRDMA {
			if provider, err = m.checkProvider(); err != nil {
				return nil, err
			}
		}
	}
	c := &state.Container{Name: o.Name, ID: m.Layout.Cluster + "-" + o.Name, Host: o.Host, Tenant: o.Tenant,
		FreeFlow: o.FreeFlow, NoShm: o.NoShm, NoRDMA: provider == "", Args: o.Args, Detached: o.Detach}
	if err := m.Layout.SaveContainer(c); err != nil {
		// SaveContainer may have made the directory before failing.
		return nil, m.undo(ctx, c, false, fmt.Errorf("record container %s: %w", c.Name, err))
	}
	defer func() {
		if err != nil {
			// A failed attach has undone its CNI ADD itself; c.IP is set once it succeeded.
			err = m.undo(ctx, c, c.IP != "", err)
		}
	}()
	if err := m.attach(ctx, c, host); err != nil {
		return nil, err
	}
	if err := writeHosts(m.Layout); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(m.Layout.AgentSockDir(c.Host), 0o755); err != nil {
		return nil, fmt.Errorf("create agent socket directory: %w", err)
	}
	spec := newSpec(m.Layout, c, o.Env)
	for _, v := range o.Volumes {
		spec.Mounts = append(spec.Mounts, v.mount())
	}
	if c.FreeFlow {
		withLibrary(&spec, lib)
	}
	if provider != "" {
		if err := withVerbs(&spec, m.Layout, c, provider); err != nil {
			return nil, err
		}
	}
	if err := writeBundle(m.Layout.ContainerDir(c.Name), spec); err != nil {
		return nil, err
	}
	return c, nil
}

// validate checks what the user can get wrong before anything is made.
func (m *Manager) validate(o RunOptions) (*state.Host, error) {
	if err := state.ValidContainerName(o.Name); err != nil {
		return nil, err
	}
	if err := checkPrereqs(m.pluginPath()); err != nil {
		return nil, err
	}
	cl, err := m.Layout.LoadCluster()
	if err != nil {
		return nil, err
	}
	if cl.Phase != state.PhaseUp {
		return nil, fmt.Errorf("cluster %q is not up (phase %q); run `freeflow cluster down` and `cluster up` again", cl.Name, cl.Phase)
	}
	host, err := cl.Host(o.Host)
	if err != nil {
		return nil, err
	}
	if old, err := m.Layout.LoadContainer(o.Name); err == nil {
		return nil, fmt.Errorf("container %s already exists on %s; remove it with `freeflow rm -f %s` or pick another name", o.Name, old.Host, o.Name)
	}
	if _, err := os.Stat(m.Layout.ContainerDir(o.Name)); err == nil {
		return nil, fmt.Errorf("container %s is half-created (%s exists); remove it with `freeflow rm -f %s`", o.Name, m.Layout.ContainerDir(o.Name), o.Name)
	}
	return host, nil
}

// attach makes the network namespace, brings up its loopback and runs
// CNI ADD, recording the IP it got.
func (m *Manager) attach(ctx context.Context, c *state.Container, host *state.Host) error {
	ns := m.Layout.ContainerNetNS(c.Name)
	if err := netns.Create(ns); err != nil {
		return err
	}
	// The bridge plugin only configures eth0; programs expect a working lo.
	if out, err := exec.Command("ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return fmt.Errorf("bring up lo in %s: %w: %s", ns, err, out)
	}
	if err := cni.WriteConfList(m.Layout, *host); err != nil {
		return err
	}
	ip, err := m.network(c.Host).Add(ctx, m.attachment(c))
	if err != nil {
		return err
	}
	c.IP = ip.String()
	return m.Layout.SaveContainer(c)
}
