package container

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/freeflow-net/freeflow/internal/ffspec"
	"github.com/freeflow-net/freeflow/internal/state"
)

// Volume is a host path bind-mounted into a container (`-v SRC:DST[:ro]`).
type Volume struct {
	Source, Destination string
	ReadOnly            bool
}

// ParseVolume parses SRC:DST[:ro|:rw]. Both paths must be absolute; SRC
// must exist. The container's root is read-only, so DST must either exist
// on the host or lie under one of the container's own tmpfs mounts (/tmp,
// /run), where the runtime can create the mount point.
func ParseVolume(s string) (Volume, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return Volume{}, fmt.Errorf("volume %q: want SRC:DST[:ro|:rw]", s)
	}
	v := Volume{Source: parts[0], Destination: filepath.Clean(parts[1])}
	if len(parts) == 3 {
		switch parts[2] {
		case "ro":
			v.ReadOnly = true
		case "rw":
		default:
			return Volume{}, fmt.Errorf("volume %q: mode %q is not ro or rw", s, parts[2])
		}
	}
	if !filepath.IsAbs(v.Source) || !filepath.IsAbs(v.Destination) {
		return Volume{}, fmt.Errorf("volume %q: both paths must be absolute", s)
	}
	if _, err := os.Stat(v.Source); err != nil {
		return Volume{}, fmt.Errorf("volume %q: %w", s, err)
	}
	if !creatable(v.Destination) {
		if _, err := os.Stat(v.Destination); err != nil {
			return Volume{}, fmt.Errorf("volume %q: %s does not exist in the container's read-only root; mount under /tmp or /run instead", s, v.Destination)
		}
	}
	return v, nil
}

// creatable reports whether dst lies under one of the container's own
// tmpfs mounts, where a missing mount point can be made — not under the
// host directories bound into /run.
func creatable(dst string) bool {
	for _, bound := range []string{state.ContainerAgentDir, ffspec.LibDir} {
		if dst == bound || strings.HasPrefix(dst, bound+"/") {
			return false
		}
	}
	return strings.HasPrefix(dst, "/tmp/") || strings.HasPrefix(dst, "/run/")
}

func (v Volume) mount() ffspec.Mount {
	opts := []string{"rbind"}
	if v.ReadOnly {
		opts = append(opts, "ro")
	}
	return ffspec.Mount{Destination: v.Destination, Type: "bind", Source: v.Source, Options: opts}
}
