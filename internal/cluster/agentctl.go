package cluster

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/freeflow-net/freeflow/internal/state"
)

// StopAgent stops host h's agent: SIGTERM (it removes its sockets), or
// SIGKILL when kill is set, to reproduce a crash. Established connections do
// not depend on the agent; new ones fall back to the overlay until it is back.
func StopAgent(l state.Layout, c *state.Cluster, h string, kill bool) error {
	host, err := c.Host(h)
	if err != nil {
		return err
	}
	if !runs(host.AgentPID, AgentBinary) {
		return nil
	}
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	if err := syscall.Kill(host.AgentPID, sig); err != nil {
		return fmt.Errorf("signal agent on %s (pid %d): %w", h, host.AgentPID, err)
	}
	deadline := time.Now().Add(killGrace)
	for runs(host.AgentPID, AgentBinary) {
		if time.Now().After(deadline) {
			return fmt.Errorf("agent on %s (pid %d) did not exit after %v", h, host.AgentPID, sig)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// StartAgent starts host h's agent unless it runs, waits until it answers,
// and records its pid. A new agent rebuilds its view from the directory.
func StartAgent(ctx context.Context, l state.Layout, c *state.Cluster, binDir, h string) error {
	host, err := c.Host(h)
	if err != nil {
		return err
	}
	if runs(host.AgentPID, AgentBinary) {
		return fmt.Errorf("agent on %s is already running (pid %d); use `freeflow agent restart`", h, host.AgentPID)
	}
	pid, err := startAgent(l, binDir, *host, c.Etcd)
	if err != nil {
		return err
	}
	host.AgentPID = pid
	if err := l.SaveCluster(c); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	return waitAgent(ctx, l, h, pid)
}
