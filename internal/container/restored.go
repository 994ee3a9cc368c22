package container

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
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

// restoredExec runs argv in every namespace of c's init, at its root and
// working directory, with env as its whole environment (as crun exec).
func restoredExec(c *state.Container, env, argv []string) *exec.Cmd {
	args := []string{"-t", strconv.Itoa(c.PID), "-m", "-u", "-i", "-n", "-p", "-r", "-w", "--", "env", "-i"}
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

// detachMoved removes what a migration added for c on the host it runs on,
// away from home: its directory record, its source checks and the routes
// of its address on every host.
func (m *Manager) detachMoved(ctx context.Context, c *state.Container) error {
	cl, err := m.Layout.LoadCluster()
	if err != nil {
		return err
	}
	home, err := cl.Host(c.Home)
	if err != nil {
		return err
	}
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
	var errs []error
	if err := netns.Do(netns.Path(m.Layout.HostNetNS(c.Host)), func() error { return cni.NFTables{}.Remove(c.ID) }); err != nil {
		errs = append(errs, err)
	}
	if err := overlay.UnplaceAddress(m.Layout, cl.Hosts, c.IP, *home); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
