package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/state"
)

// ErrNotFound is returned by Down when nothing of the cluster exists.
var ErrNotFound = errors.New("cluster does not exist")

// Exists reports whether anything of the cluster is present: its directory
// or any of its network namespaces.
func Exists(l state.Layout) (bool, error) {
	if _, err := os.Stat(l.Dir()); err == nil {
		return true, nil
	}
	names, err := netns.List(nsPrefix(l))
	return len(names) > 0, err
}

// nsPrefix is the prefix of every network namespace of the cluster. Cluster
// names contain no '-', so it never matches another cluster's namespaces.
func nsPrefix(l state.Layout) string { return l.Cluster + "-" }

// Down removes everything the cluster made. It holds the cluster lock, and
// returns ErrNotFound (having changed nothing) when the cluster does not
// exist.
func Down(l state.Layout) error {
	ok, err := Exists(l)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("cluster %q: %w", l.Cluster, ErrNotFound)
	}
	unlock, err := l.Lock()
	if err != nil {
		return err
	}
	defer unlock()
	return teardown(l)
}

// teardown removes, in order: crun containers, every process in the
// cluster's namespaces, mounts under the cluster directory, the namespaces
// and the directory. Each step runs even if an earlier one failed, so one
// stuck part does not leave the rest behind; the errors are joined.
func teardown(l state.Layout) error {
	names, err := netns.List(nsPrefix(l))
	if err != nil {
		return err
	}
	paths := make([]string, len(names))
	for i, n := range names {
		paths[i] = netns.Path(n)
	}
	var errs []error
	deleteContainers(l.CrunRoot())
	if left := stopProcesses(paths); len(left) > 0 {
		errs = append(errs, fmt.Errorf("processes %v survived SIGKILL", left))
	}
	// Again, now that nothing runs: a container that was mid-start the
	// first time is stopped now, and deleting it removes its cgroups.
	deleteContainers(l.CrunRoot())
	if err := unmountAll(l.Dir()); err != nil {
		errs = append(errs, err)
	}
	for _, n := range names {
		if err := netns.Delete(n); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(l.Dir()); err != nil {
		errs = append(errs, fmt.Errorf("remove %s: %w", l.Dir(), err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("tear down cluster %q (run `freeflow --cluster %s cluster down` again): %w", l.Cluster, l.Cluster, err)
	}
	return nil
}

// deleteContainers force-deletes every container crun knows under root.
// Errors are ignored: a container already gone is what we want, and any
// process left behind is caught by its network namespace next.
func deleteContainers(root string) {
	if _, err := os.Stat(root); err != nil {
		return
	}
	out, err := exec.Command("crun", "--root", root, "list", "-q").Output()
	if err != nil {
		return
	}
	for _, id := range strings.Fields(string(out)) {
		exec.Command("crun", "--root", root, "delete", "--force", id).Run()
	}
}
