package cluster

import (
	"bytes"
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
	_, ok := procStat(pid)
	return ok
}

// runs reports whether pid is alive and runs prog (by its file name): a
// pid saved in the cluster state may since have been reused by another
// program, which must be neither taken for the cluster's process nor
// signalled. Only for a process past its exec: right after spawn the pid
// may still run nsenter.
func runs(pid int, prog string) bool {
	comm, ok := procStat(pid)
	name := filepath.Base(prog)
	if len(name) > commLen {
		name = name[:commLen]
	}
	return ok && comm == name
}

// commLen is how much of a program's file name the kernel keeps as its
// command name (TASK_COMM_LEN - 1).
const commLen = 15

// procStat returns the command name of pid from /proc/<pid>/stat, and
// false if pid does not exist or is a zombie.
func procStat(pid int) (comm string, ok bool) {
	if pid <= 0 {
		return "", false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", false
	}
	// The state follows the command name in parentheses, which may hold
	// spaces and parentheses itself.
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open || end+2 >= len(b) || b[end+2] == 'Z' || b[end+2] == 'X' {
		return "", false
	}
	return string(b[open+1 : end]), true
}
