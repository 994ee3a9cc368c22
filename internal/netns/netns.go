package netns

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/freeflow-net/freeflow/internal/state"
	"golang.org/x/sys/unix"
)

// Path returns the file the named network namespace is bound to.
func Path(name string) string { return state.NetNSPath(name) }

// Exists reports whether the named network namespace exists.
func Exists(name string) bool {
	_, err := os.Stat(Path(name))
	return err == nil
}

// Create makes the named network namespace; an existing one is kept, so a
// retried step does not fail on what an earlier try already made.
func Create(name string) error {
	if Exists(name) {
		return nil
	}
	if err := ip("netns", "add", name); err != nil && !Exists(name) {
		return fmt.Errorf("create network namespace %q: %w", name, err)
	}
	return nil
}

// Delete removes the named network namespace; one that is already gone is
// not an error, so teardown can be repeated.
func Delete(name string) error {
	if !Exists(name) {
		return nil
	}
	if err := ip("netns", "delete", name); err != nil && Exists(name) {
		return fmt.Errorf("delete network namespace %q: %w", name, err)
	}
	return nil
}

// Rename gives network namespace from the name to, which must be free:
// the namespace is bound at the new name before the old binding goes.
func Rename(from, to string) error {
	if Exists(to) {
		return fmt.Errorf("rename network namespace %q to %q: that name is taken", from, to)
	}
	f, err := os.OpenFile(Path(to), os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return fmt.Errorf("rename network namespace %q: %w", from, err)
	}
	f.Close()
	if err := unix.Mount(Path(from), Path(to), "", unix.MS_BIND, ""); err != nil {
		os.Remove(Path(to))
		return fmt.Errorf("rename network namespace %q to %q: bind: %w", from, to, err)
	}
	if err := unix.Unmount(Path(from), unix.MNT_DETACH); err != nil {
		return fmt.Errorf("rename network namespace %q to %q: unmount the old name: %w", from, to, err)
	}
	return os.Remove(Path(from))
}

// List returns the names of the network namespaces whose name starts with
// prefix.
func List(prefix string) ([]string, error) {
	entries, err := os.ReadDir("/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list network namespaces: %w", err)
	}
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// Command returns a command that runs name inside the network namespace
// bound at nsPath (nsenter execs the program, so the pid is the program's).
func Command(nsPath, name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=" + nsPath, "--", name}, args...)...)
}

func ip(args ...string) error {
	var out bytes.Buffer
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}
