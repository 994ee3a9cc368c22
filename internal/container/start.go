package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/freeflow-net/freeflow/internal/state"
)

// startDetached starts the container with its output in LogFile and records
// its init's pid; if it cannot start, the container is removed.
func (m *Manager) startDetached(ctx context.Context, c *state.Container) (err error) {
	defer func() {
		if err != nil {
			err = m.undo(ctx, c, true, err)
		}
	}()
	log, err := os.OpenFile(m.LogFile(c.Name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("create log of %s: %w", c.Name, err)
	}
	defer log.Close()
	cmd := m.runtime().run(c.ID, m.Layout.ContainerDir(c.Name), m.pidFile(c.Name), true)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("start container %s: %w: %s", c.Name, err, tail(m.LogFile(c.Name)))
	}
	if c.PID, err = readPID(m.pidFile(c.Name)); err != nil {
		return err
	}
	return m.Layout.SaveContainer(c)
}

// runForeground runs the container with the caller's stdio and returns its
// exit code. Signals to freeflow are passed on to the container's init (see
// forward); freeflow itself stays to clean up.
func (m *Manager) runForeground(ctx context.Context, c *state.Container, remove bool) (int, error) {
	cmd := m.runtime().run(c.ID, m.Layout.ContainerDir(c.Name), m.pidFile(c.Name), false)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = m.Stdin, m.Stdout, m.Stderr
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go m.forward(sigs, c.ID)

	if err := cmd.Start(); err != nil {
		return 0, m.abandon(ctx, c, fmt.Errorf("start crun for %s: %w", c.Name, err))
	}
	done := make(chan struct{})
	go func() { m.recordPID(c, done) }()
	err := cmd.Wait()
	close(done)
	code, err := exitCode(err)
	if err != nil {
		return 0, m.abandon(ctx, c, fmt.Errorf("run container %s: %w", c.Name, err))
	}
	if _, perr := readPID(m.pidFile(c.Name)); perr != nil {
		return 0, m.abandon(ctx, c, fmt.Errorf("container %s did not start (crun exited with %d; its message is above)", c.Name, code))
	}
	if remove {
		return code, m.Remove(ctx, c.Name, true)
	}
	return code, nil
}

// forward passes signals on to the container's init. The init is pid 1 of
// its namespace, which ignores signals it has no handler for, so a second
// Ctrl-C kills it: the user is never left with a container that cannot be
// stopped from the terminal.
func (m *Manager) forward(sigs <-chan os.Signal, id string) {
	interrupts := 0
	for s := range sigs {
		name := map[os.Signal]string{syscall.SIGINT: "INT", syscall.SIGTERM: "TERM", syscall.SIGHUP: "HUP"}[s]
		if s == syscall.SIGINT {
			if interrupts++; interrupts > 1 {
				name = "KILL"
			}
		}
		_ = m.runtime().kill(id, name)
	}
}

// recordPID saves the init's pid in the record once crun has written it.
func (m *Manager) recordPID(c *state.Container, done <-chan struct{}) {
	for {
		if pid, err := readPID(m.pidFile(c.Name)); err == nil {
			if unlock, err := m.lock(); err == nil {
				if cur, err := m.Layout.LoadContainer(c.Name); err == nil && cur.ID == c.ID {
					cur.PID = pid
					_ = m.Layout.SaveContainer(cur)
				}
				unlock()
			}
			return
		}
		select {
		case <-done:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// abandon removes a container that could not run and returns err.
func (m *Manager) abandon(ctx context.Context, c *state.Container, err error) error {
	unlock, lerr := m.lock()
	if lerr != nil {
		return fmt.Errorf("%w\n%v; remove what is left with `freeflow rm -f %s`", err, lerr, c.Name)
	}
	defer unlock()
	return m.undo(ctx, c, true, err)
}

// exitCode turns crun's exit into the container's exit code; crun exits
// with the container's code (128+n for a signal).
func exitCode(err error) (int, error) {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	return 0, err
}

func readPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read container pid: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("read container pid from %s: %q is not a pid", path, b)
	}
	return pid, nil
}

// tail returns the end of a log file for an error message.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 400 {
		b = b[len(b)-400:]
	}
	return strings.TrimSpace(string(b))
}
