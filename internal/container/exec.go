package container

import (
	"fmt"
	"os"
)

// Exec runs argv inside a running container with the manager's stdio and
// returns its exit code.
func (m *Manager) Exec(name string, argv []string) (int, error) {
	if len(argv) == 0 {
		return 0, fmt.Errorf("no command to run in %s: give it after --", name)
	}
	c, err := m.Layout.LoadContainer(name)
	if err != nil {
		return 0, err
	}
	if st := m.status(c); st != StatusRunning {
		return 0, fmt.Errorf("container %s is %s, not running", name, st)
	}
	cmd := m.runtime().exec(c.ID, m.execEnv(c), argv)
	if c.Restored {
		var files []*os.File
		if cmd, files, err = restoredExec(c, m.execEnv(c), argv); err != nil {
			return 0, err
		}
		defer func() {
			for _, f := range files {
				f.Close()
			}
		}()
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = m.Stdin, m.Stdout, m.Stderr
	code, err := exitCode(cmd.Run())
	if err != nil {
		return 0, fmt.Errorf("exec in %s: %w", name, err)
	}
	return code, nil
}
