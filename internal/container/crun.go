package container

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// crunScript runs its arguments (crun, or CRIU restoring a migrated
// container) in a private mount namespace (unshare) prepared the way crun
// needs it on this machine:
//   - the host mixes cgroup v1 controllers with a cgroup v2 hierarchy at
//     /sys/fs/cgroup/unified, which crun refuses ("cgroups in hybrid mode
//     not supported"); unmounting it in the private namespace leaves crun a
//     plain cgroup v1 host without touching anyone else's view;
//   - for `run` and a restore, FF_ROOTFS is the bundle's rootfs directory: / is bound there
//     read-only. The mount lives only in this namespace and in the
//     container's copy of it, so nothing is left mounted when they end.
//     (root.path "/" itself fails: pivot_root gives EBUSY.)
const crunScript = `umount /sys/fs/cgroup/unified 2>/dev/null
if [ -n "$FF_ROOTFS" ]; then
	mount --bind / "$FF_ROOTFS" && mount -o remount,bind,ro "$FF_ROOTFS" || exit 125
fi
exec "$@"`

// runtime drives crun with the cluster's state directory.
type runtime struct{ root string }

// command returns crun with args, run through crunScript; rootfs is empty
// except for `run`.
func (r runtime) command(rootfs string, args ...string) *exec.Cmd {
	return inMountNS(rootfs, append([]string{"crun", "--root", r.root}, args...)...)
}

// inMountNS returns the command that runs argv through crunScript.
func inMountNS(rootfs string, argv ...string) *exec.Cmd {
	cmd := exec.Command("unshare", append([]string{"-m", "--propagation", "private", "sh", "-c", crunScript, "sh"}, argv...)...)
	cmd.Env = append(os.Environ(), "FF_ROOTFS="+rootfs)
	return cmd
}

// run returns the command that starts container id from bundle; detached,
// crun returns once the container runs, otherwise when it exits, with its
// exit code. Either way the init's pid is written to pidFile.
func (r runtime) run(id, bundle, pidFile string, detach bool) *exec.Cmd {
	args := []string{"run", "--bundle", bundle, "--pid-file", pidFile}
	if detach {
		args = append(args, "--detach")
	}
	return r.command(filepath.Join(bundle, "rootfs"), append(args, id)...)
}

// exec returns the command that runs argv in container id, with env
// (K=V) added to the container's environment.
func (r runtime) exec(id string, env, argv []string) *exec.Cmd {
	args := []string{"exec"}
	for _, e := range env {
		args = append(args, "--env", e)
	}
	return r.command("", append(append(args, id), argv...)...)
}

// crunState is what `crun state` reports.
type crunState struct {
	Status string `json:"status"` // created, running, stopped
	PID    int    `json:"pid"`
}

// state returns the container's state; ok is false when crun does not know it.
func (r runtime) state(id string) (st crunState, ok bool, err error) {
	out, err := r.output("state", id)
	if err != nil {
		if strings.Contains(err.Error(), "does not exist") || strings.Contains(err.Error(), "No such file") {
			return crunState{}, false, nil
		}
		return crunState{}, false, err
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return crunState{}, false, fmt.Errorf("parse crun state of %s: %w", id, err)
	}
	return st, true, nil
}

// kill sends sig (a name such as "KILL") to the container's init.
func (r runtime) kill(id, sig string) error {
	_, err := r.output("kill", id, sig)
	return err
}

// delete removes a stopped container's crun state and cgroups; force
// kills it first if it still runs.
func (r runtime) delete(id string, force bool) error {
	args := []string{"delete", id}
	if force {
		args = []string{"delete", "--force", id}
	}
	_, err := r.output(args...)
	return err
}

func (r runtime) output(args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := r.command("", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("crun %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}
