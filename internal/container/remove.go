package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

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
	return m.teardown(ctx, c)
}

// teardown undoes everything run made, step by step; each step accepts
// that its part may already be gone, and a failing step does not stop the
// others. The caller holds the lock.
func (m *Manager) teardown(ctx context.Context, c *state.Container) error {
	var errs []error
	if err := m.runtime().delete(c.ID, true); err != nil && !notFound(err) {
		errs = append(errs, fmt.Errorf("delete container %s: %w", c.Name, err))
	}
	if err := m.detach(ctx, c); err != nil {
		errs = append(errs, err)
	}
	if err := netns.Delete(m.Layout.ContainerNetNS(c.Name)); err != nil {
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

// detach runs CNI DEL, which the plugins make idempotent. Without the host
// (the cluster is being torn down) there is nothing left to detach from.
func (m *Manager) detach(ctx context.Context, c *state.Container) error {
	if c.Host == "" || !netns.Exists(m.Layout.HostNetNS(c.Host)) {
		return nil
	}
	if _, err := os.Stat(m.Layout.CNIConfDir(c.Host)); err != nil {
		return nil // never attached: run failed before writing the configuration
	}
	return m.network(c.Host).Del(ctx, m.attachment(c))
}

// notFound reports whether crun failed because it does not know the container.
func notFound(err error) bool {
	return strings.Contains(err.Error(), "No such file or directory") || strings.Contains(err.Error(), "does not exist")
}
