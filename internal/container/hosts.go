package container

import (
	"fmt"
	"os"
	"strings"

	"github.com/freeflow-net/freeflow/internal/state"
)

// hostsHeader is the part of the cluster's hosts file every container needs
// whatever else runs.
const hostsHeader = `# written by freeflow: container name -> overlay IP
127.0.0.1	localhost
::1	localhost ip6-localhost ip6-loopback
`

// writeHosts rewrites the cluster's hosts file from the container records.
// It writes in place rather than renaming a new file over it: containers
// bind-mount the file, and a bind mount keeps pointing at the old inode.
func writeHosts(l state.Layout) error {
	cs, err := l.Containers()
	if err != nil {
		return fmt.Errorf("list containers for the hosts file: %w", err)
	}
	var b strings.Builder
	b.WriteString(hostsHeader)
	for _, c := range cs {
		if c.IP != "" {
			fmt.Fprintf(&b, "%s\t%s\n", c.IP, c.Name)
		}
	}
	f, err := os.OpenFile(l.HostsFile(), os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("open hosts file: %w", err)
	}
	defer f.Close()
	// Write first, then cut what is left of a longer old version, so a
	// reader never sees an empty file.
	if _, err := f.WriteAt([]byte(b.String()), 0); err != nil {
		return fmt.Errorf("write hosts file %s: %w", l.HostsFile(), err)
	}
	if err := f.Truncate(int64(b.Len())); err != nil {
		return fmt.Errorf("truncate hosts file %s: %w", l.HostsFile(), err)
	}
	return nil
}
