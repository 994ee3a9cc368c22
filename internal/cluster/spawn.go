package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/freeflow-net/freeflow/internal/netns"
)

// spawn starts prog inside the network namespace ns, detached from the CLI:
// its own session, stdin from /dev/null and output appended to logPath, so
// it outlives the CLI and never writes to the user's terminal. extra files
// become the child's fds 3, 4, ... It returns the pid.
func spawn(ns, logPath string, extra []*os.File, prog string, args ...string) (int, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return 0, fmt.Errorf("create log directory: %w", err)
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, fmt.Errorf("open log %s: %w", logPath, err)
	}
	defer logf.Close()
	cmd := netns.Command(netns.Path(ns), prog, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s in %s: %w", prog, ns, err)
	}
	pid := cmd.Process.Pid
	// Not waited for: the process belongs to the cluster, not to this CLI,
	// and `cluster down` stops it by its network namespace.
	cmd.Process.Release()
	return pid, nil
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses, which may hold spaces.
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' {
			return i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
		}
	}
	return false
}
