package cluster

import (
	"fmt"
	"sort"
	"strings"

	"github.com/freeflow-net/freeflow/internal/mountinfo"
	"golang.org/x/sys/unix"
)

// mountsUnder returns the mount points at or below dir in this process's
// mount namespace, deepest first, so unmounting in order never hits a busy
// parent.
func mountsUnder(dir string) ([]string, error) {
	mounts, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range mounts {
		if m.Point == dir || strings.HasPrefix(m.Point, dir+"/") {
			out = append(out, m.Point)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// unmountAll detaches every mount under dir (lazily, so a mount still in
// use by a dying process does not block teardown).
func unmountAll(dir string) error {
	mps, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	for _, mp := range mps {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
			return fmt.Errorf("unmount %s: %w", mp, err)
		}
	}
	return nil
}
