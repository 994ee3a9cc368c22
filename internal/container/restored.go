package container

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/cni"
	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/overlay"
	"github.com/freeflow-net/freeflow/internal/state"
	"golang.org/x/sys/unix"
)

// A migrated container's processes were restored by CRIU, so crun does not
// know them: its init is found by pid and start time, entered with nsenter
// and stopped with a signal.

// restoredAlive reports whether c's init still runs (not a reused pid).
func restoredAlive(c *state.Container) bool {
	return c.PID > 0 && c.Started != 0 && startTime(c.PID) == c.Started
}

func restoredStatus(c *state.Container) string {
	if restoredAlive(c) {
		return StatusRunning
	}
	return StatusExited
}

// restoredExec runs argv in every namespace of c's init with the
// container's capabilities and no supplementary groups, env its whole
// environment (as crun exec). The root and working directory are the
// mount namespace's, never the init's (which the container may have
// chrooted somewhere it wrote), and setpriv and env are found there, in
// the host's read-only tree.
func restoredExec(c *state.Container, env, argv []string) *exec.Cmd {
	caps := make([]string, len(containerCaps))
	for i, cp := range containerCaps {
		caps[i] = "+" + strings.ToLower(strings.TrimPrefix(cp, "CAP_"))
	}
	args := []string{"-t", strconv.Itoa(c.PID), "-m", "-u", "-i", "-n", "-p", "--",
		"/usr/bin/setpriv", "--clear-groups", "--inh-caps", "-all", "--bounding-set", "-all," + strings.Join(caps, ","),
		"--", "/usr/bin/env", "-i"}
	return exec.Command("nsenter", append(append(args, env...), argv...)...)
}

// stopRestored kills c's init, the last process of its pid namespace to
// go, and waits for it.
func stopRestored(c *state.Container) error {
	if !restoredAlive(c) {
		return nil
	}
	if err := unix.Kill(c.PID, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("stop container %s (pid %d): %w", c.Name, c.PID, err)
	}
	for deadline := time.Now().Add(5 * time.Second); restoredAlive(c); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("container %s (pid %d) survived SIGKILL for 5 s", c.Name, c.PID)
		}
	}
	return nil
}

// unregisterMoved takes c's record out of the directory through the agent
// of the host it runs on, away from home.
func (m *Manager) unregisterMoved(ctx context.Context, c *state.Container) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	agent, err := agentapi.DialAdmin(m.Layout.AdminSocket(c.Host))
	if err != nil {
		return fmt.Errorf("reach %s's agent: %w", c.Host, err)
	}
	defer agent.Close()
	if err := agent.Unregister(ctx, c.ID); err != nil {
		return fmt.Errorf("unregister %s from %s's agent: %w", c.Name, c.Host, err)
	}
	return nil
}

// forgetMoves removes what migrations may have left for c on every host
// but home (whose source checks CNI DEL removes): source checks and the
// routes of its address. Idempotent, and run for every container, so a
// migration cut off half-way leaves nothing behind either.
func (m *Manager) forgetMoves(c *state.Container, home string) error {
	cl, err := m.Layout.LoadCluster()
	if err != nil || c.IP == "" {
		return nil // no cluster (down) or no address: nothing was placed
	}
	h, err := cl.Host(home)
	if err != nil {
		return err
	}
	var errs []error
	for _, o := range cl.Hosts {
		if o.Name == home || !netns.Exists(m.Layout.HostNetNS(o.Name)) {
			continue
		}
		if err := netns.Do(netns.Path(m.Layout.HostNetNS(o.Name)), func() error { return cni.NFTables{}.Remove(c.ID) }); err != nil {
			errs = append(errs, err)
		}
	}
	if err := overlay.UnplaceAddress(m.Layout, cl.Hosts, c.IP, *h); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
