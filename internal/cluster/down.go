package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

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

// teardown removes, in order: crun containers (and the runc containers of
// Kubernetes pods on the hosts, whose processes are in the pods' own network
// namespaces), every process in the
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
	// Errors here are for the pass below: the kubelet may hold a cgroup
	// until it is stopped.
	_ = deleteRuncContainers(l.RuncRoot())
	if left := stopProcesses(paths); len(left) > 0 {
		errs = append(errs, fmt.Errorf("processes %v survived SIGKILL", left))
	}
	// Again, now that nothing runs: a container that was mid-start the
	// first time is stopped now, and deleting it removes its cgroups.
	deleteContainers(l.CrunRoot())
	if err := deleteRuncContainers(l.RuncRoot()); err != nil {
		errs = append(errs, err)
	}
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

// runcScript runs runc in a private mount namespace without the cgroup v2
// hierarchy this machine mounts beside its v1 controllers (see crunScript in
// internal/container), where runc sees the v1 host it created the
// containers' cgroups on.
const runcScript = `umount /sys/fs/cgroup/unified 2>/dev/null; exec runc "$@"`

// deleteRuncContainers force-deletes every runc container under
// root/<host>/<namespace> (containerd's runc state, see
// state.Layout.RuncRoot): runc kills the container's processes and removes
// its cgroups. runc gives up on a cgroup its killed process has not left
// yet (it removes its state all the same), so the cgroups are removed
// here too, waiting up to killGrace. It reports cgroups left; other errors
// are ignored as in deleteContainers.
func deleteRuncContainers(root string) error {
	roots, _ := filepath.Glob(filepath.Join(root, "*", "*"))
	var cgroups []string
	for _, r := range roots {
		runc := func(args ...string) *exec.Cmd {
			argv := append([]string{"-m", "--propagation", "private", "sh", "-c", runcScript, "sh", "--root", r}, args...)
			return exec.Command("unshare", argv...)
		}
		out, err := runc("list", "-q").Output()
		if err != nil {
			continue
		}
		for _, id := range strings.Fields(string(out)) {
			cgroups = append(cgroups, runcCgroups(filepath.Join(r, id, "state.json"))...)
			runc("delete", "--force", id).Run()
		}
	}
	return removeCgroups(cgroups)
}

// runcCgroups returns the cgroup directories runc's state file names.
func runcCgroups(stateFile string) []string {
	var st struct {
		CgroupPaths map[string]string `json:"cgroup_paths"`
	}
	b, err := os.ReadFile(stateFile)
	if err != nil || json.Unmarshal(b, &st) != nil {
		return nil
	}
	var dirs []string
	for _, d := range st.CgroupPaths {
		dirs = append(dirs, d)
	}
	return dirs
}

// removeCgroups removes the (leaf) cgroup directories, retrying while a
// dying process still holds one, up to killGrace.
func removeCgroups(dirs []string) error {
	deadline := time.Now().Add(killGrace)
	for {
		var left []string
		for _, d := range dirs {
			if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
				left = append(left, d)
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroups of pods left (a process still in them): %v", left)
		}
		dirs = left
		time.Sleep(20 * time.Millisecond)
	}
}
