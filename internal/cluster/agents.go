package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/state"
)

// AgentBinary is the agent's file name; it is looked up next to the running
// freeflow executable (both land in bin/).
const AgentBinary = "freeflowd"

// agentTimeout bounds how long `up` waits for each agent to answer.
const agentTimeout = 10 * time.Second

// agentLog is the log file of host h's agent.
func agentLog(l state.Layout, h string) string {
	return filepath.Join(l.LogDir(), "agent-"+h+".log")
}

// startAgent runs freeflowd for host h inside h's namespace. A managed etcd
// is on the fabric, which the host reaches; an external one is reached from
// the namespace the CLI runs in, which the agent inherits as fd 3 and dials
// etcd through (no route from the cluster to the outside is ever made).
// The agent installs its fabric guard rules (freeflowd --fabric-guard, on
// by default) in h's namespace, which the cluster made; `down` removes the
// namespace and the rules with it.
func startAgent(l state.Layout, binDir string, h state.Host, etcd state.Etcd) (int, error) {
	if err := os.MkdirAll(l.AgentSockDir(h.Name), 0o755); err != nil {
		return 0, fmt.Errorf("create agent socket directory: %w", err)
	}
	args := []string{
		"--cluster", l.Cluster,
		"--host", h.Name,
		"--fabric-ip", h.FabricIP,
		"--subnet", h.Subnet,
		"--etcd", strings.Join(etcd.Endpoints, ","),
		"--sock-dir", l.AgentSockDir(h.Name),
		"--admin-socket", l.AdminSocket(h.Name),
		"--log", agentLog(l, h.Name),
	}
	var extra []*os.File
	if !etcd.Managed {
		self, err := os.Open("/proc/self/ns/net")
		if err != nil {
			return 0, fmt.Errorf("open this process's network namespace for the agent's etcd client: %w", err)
		}
		defer self.Close()
		extra = []*os.File{self}
		args = append(args, "--etcd-netns", "/proc/self/fd/3")
	}
	return spawn(l.HostNetNS(h.Name), agentLog(l, h.Name), extra, filepath.Join(binDir, AgentBinary), args...)
}

// waitAgent waits until host h's agent answers on its admin socket.
func waitAgent(ctx context.Context, l state.Layout, h string, pid int) error {
	var last error
	for {
		if last = agentReady(ctx, l.AdminSocket(h)); last == nil {
			return nil
		}
		if !alive(pid) {
			return fmt.Errorf("agent on %s (pid %d) exited during start-up; see %s", h, pid, agentLog(l, h))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent on %s did not answer within %s (%v); see %s", h, agentTimeout, last, agentLog(l, h))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// agentReady reports whether the agent answers STATUS on its admin socket.
func agentReady(ctx context.Context, admin string) error {
	_, err := AgentStatus(ctx, admin)
	return err
}

// AgentStatus asks the agent behind admin socket path for its status.
func AgentStatus(ctx context.Context, path string) (agentapi.Status, error) {
	c, err := agentapi.DialAdmin(path)
	if err != nil {
		return agentapi.Status{}, err
	}
	defer c.Close()
	return c.Status(ctx)
}
