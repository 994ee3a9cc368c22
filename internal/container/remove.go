package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/state"
)

// Remove removes a container: its process, crun state, network attachment,
// network namespace, directory and hosts entry. A running container is
// removed only with force.
func (m *Manager) Remove(ctx context.Context, name string, force bool) error {
	unlock, err := m.lock()
	if err != nil {
		return err
	}
	defer unlock()
	c, err := m.Layout.LoadContainer(name)
	if err != nil {
		if _, serr := os.Stat(m.Layout.ContainerDir(name)); serr != nil || !force {
			return err
		}
		// Half-created (no record): remove what its name tells us about.
		c = &state.Container{Name: name, ID: m.Layout.Cluster + "-" + name}
	}
	if !force && m.status(c) == StatusRunning {
		return fmt.Errorf("container %s is running; stop it first or use `freeflow rm -f %s`", name, name)
	}
	// Out of the directory first: if the agent cannot do it now, the
	// container is left whole and a later rm can finish the job.
	if err := m.detach(ctx, c, false); err != nil {
		return fmt.Errorf("container %s is left as it is: %w\nremove it again once that is fixed (`freeflow status` shows what is down; `freeflow cluster up` brings back a dead agent or etcd)", name, err)
	}
	return m.teardown(ctx, c, false)
}

// teardown undoes everything run made, step by step; each step accepts
// that its part may already be gone, and a failing step does not stop the
// others. detach says whether the container may still be attached to the
// network (its attachment is discarded). The caller holds the lock.
func (m *Manager) teardown(ctx context.Context, c *state.Container, detach bool) error {
	var errs []error
	if c.Restored {
		if err := stopRestored(c); err != nil {
			errs = append(errs, err)
		}
	}
	// Also after a move: a container restored where it was keeps crun's
	// state of its first start.
	if err := m.runtime().delete(c.ID, true); err != nil && !notFound(err) {
		errs = append(errs, fmt.Errorf("delete container %s: %w", c.Name, err))
	}
	if detach {
		if err := m.detach(ctx, c, true); err != nil {
			errs = append(errs, err)
		}
	}
	if err := netns.Delete(m.Layout.ContainerNetNS(c.Name)); err != nil {
		errs = append(errs, err)
	}
	if err := clearMigration(m.Layout, c.Name); err != nil {
		errs = append(errs, err)
	}
	if err := removeDir(m.Layout.ContainerDir(c.Name)); err != nil {
		errs = append(errs, err)
	}
	if err := writeHosts(m.Layout); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// undo removes a container that failed to come up and returns why it
// failed, adding what could not be removed. The caller holds the lock.
func (m *Manager) undo(ctx context.Context, c *state.Container, detach bool, why error) error {
	if err := m.teardown(ctx, c, detach); err != nil {
		return fmt.Errorf("%w\ncleaning up after it failed too; run `freeflow rm -f %s` once the cause is fixed: %v", why, c.Name, err)
	}
	return why
}

// detach runs CNI DEL, which the plugins make idempotent: cni.Network.Del,
// or Discard when discard is set. Without the host (the cluster is being
// torn down) there is nothing left to detach from.
//
// A migrated container's attachment is its home host's, which holds its
// address: off home, its record, source checks and routes on the host it
// runs on go first.
func (m *Manager) detach(ctx context.Context, c *state.Container, discard bool) error {
	home := c.Host
	if c.Home != "" {
		home = c.Home
	}
	if home == "" || !netns.Exists(m.Layout.HostNetNS(home)) {
		return nil
	}
	if home != c.Host {
		if err := m.unregisterAt(ctx, c, c.Host); err != nil {
			return err
		}
	}
	if err := m.forgetMoves(c, home); err != nil {
		return err
	}
	if _, err := os.Stat(m.Layout.CNIConfDir(home)); err != nil {
		return nil // never attached: run failed before writing the configuration
	}
	if discard {
		return m.network(home).Discard(ctx, m.attachment(c))
	}
	// After a move the home agent may not have seen the record leave yet
	// (its directory cache follows a watch), and refuses a record of
	// another host's.
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		err := m.network(home).Del(ctx, m.attachment(c))
		if err == nil || home == c.Host || !strings.Contains(err.Error(), "belongs to host") || time.Now().After(deadline) {
			return err
		}
	}
}

// notFound reports whether crun failed because it does not know the container.
func notFound(err error) bool {
	return strings.Contains(err.Error(), "No such file or directory") || strings.Contains(err.Error(), "does not exist")
}
