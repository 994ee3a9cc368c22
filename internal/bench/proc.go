package bench

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// pipeGrace is how long runCmd waits for the output pipes to close after
// the command exited.
const pipeGrace = 5 * time.Second

// runCmd runs cmd in its own process group and returns its stdout. When ctx
// ends (timeout, Ctrl-C) the whole group is killed, so no tool outlives the
// run; its own process group also keeps a terminal's Ctrl-C from reaching
// it before the bench has decided how to clean up.
func runCmd(ctx context.Context, cmd *exec.Cmd) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A process outside the group may hold the output pipes (a client
	// inside a container, when `freeflow exec` was killed): Wait must
	// not wait for it forever.
	cmd.WaitDelay = pipeGrace
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Args[0], err)
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		case <-done:
		}
	}()
	err := cmd.Wait()
	close(done)
	if ctx.Err() != nil {
		return stdout.Bytes(), fmt.Errorf("%s: %w", commandLine(cmd.Args), ctx.Err())
	}
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return stdout.Bytes(), fmt.Errorf("%s: %w: %s", commandLine(cmd.Args), err, lastLines(msg, 5))
	}
	return stdout.Bytes(), nil
}

// scriptArg stands for connrate.py's text in a displayed command: the
// command is exact for a shell in the directory that keeps connrate.py.
const scriptArg = `"$(cat connrate.py)"`

// displayCommand writes argv as a shell command, with the connrate.py
// text (if any) shown as scriptArg.
func displayCommand(argv []string, script string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if script != "" && a == script {
			q[i] = scriptArg
		} else {
			q[i] = commandLine([]string{a})
		}
	}
	return strings.Join(q, " ")
}

// displayError is err with connrate.py's text (if any) shown as
// scriptArg, as in the displayed commands.
func displayError(err error, script string) string {
	if script == "" {
		return err.Error()
	}
	return strings.ReplaceAll(err.Error(), commandLine([]string{script}), scriptArg)
}

// displayServer writes a server's command as its site runs it, with
// connrate.py's text shown as scriptArg (which the server's own shell
// expands, in the directory that keeps connrate.py).
func displayServer(pin pinning, s Server, script string) string {
	shell := s.Shell
	if script != "" {
		shell = strings.ReplaceAll(shell, commandLine([]string{script}), scriptArg)
	}
	return commandLine(pin.server([]string{"sh", "-c", shell}))
}

// commandLine writes argv the way a shell user would type it.
func commandLine(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\n'\"$\\;&|<>*?()#`") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

// lastLines keeps the end of a long error output, where the reason is.
func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
