package kubelab

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// proc is a process the harness started, logging to a file. `cluster down`
// ends it (it runs in one of the cluster's network namespaces); the harness
// only waits for it, so its exit is seen at once.
type proc struct {
	what, log string
	cmd       *exec.Cmd
	done      chan struct{} // closed when it has exited
	err       error         // its exit status, once done
}

// start starts cmd with stdout and stderr appended to logPath, in its own
// session (no signal from the test's terminal reaches it).
func start(cmd *exec.Cmd, logPath, what string) (*proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log of %s: %w", what, err)
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", what, err)
	}
	p := &proc{what: what, log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}
