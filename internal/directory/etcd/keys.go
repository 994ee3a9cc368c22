package etcd

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/freeflow-net/freeflow/internal/directory"
)

// Prefix returns the key prefix of cluster.
func Prefix(cluster string) string { return "/freeflow/" + cluster + "/" }

// The two kinds of record under a cluster's prefix (see directory.go).
const (
	containersDir = "containers/"
	hostsDir      = "hosts/"
)

// checkName refuses names that would break the key layout: empty, or with a
// '/' that would nest a key below another.
func checkName(what, name string) error {
	if name == "" {
		return fmt.Errorf("directory: empty %s", what)
	}
	if strings.Contains(name, "/") {
		return fmt.Errorf("directory: %s %q contains '/', which the etcd key layout does not allow", what, name)
	}
	return nil
}

func (d *Directory) containerKey(id string) string { return d.prefix + containersDir + id }
func (d *Directory) hostKey(name string) string    { return d.prefix + hostsDir + name }

// record is one decoded key under the prefix: a container or a host.
type record struct {
	container *directory.Container
	host      *directory.Host
}

// recordKey is the cache's name for a key: its kind directory plus its id.
// ok is false for keys that are not ours to read (another layout, a deeper
// path); they are ignored, not reported.
func recordKey(prefix, key string) (dir, name string, ok bool) {
	rest, found := strings.CutPrefix(key, prefix)
	if !found {
		return "", "", false
	}
	for _, dir := range []string{containersDir, hostsDir} {
		if name, found := strings.CutPrefix(rest, dir); found && checkName("key", name) == nil {
			return dir, name, true
		}
	}
	return "", "", false
}

// decode parses the JSON value of a key in dir. A record whose own id
// disagrees with its key is refused: lookups by key and by content would
// otherwise give different answers.
func decode(dir, name string, value []byte) (record, error) {
	switch dir {
	case containersDir:
		var c directory.Container
		if err := json.Unmarshal(value, &c); err != nil {
			return record{}, err
		}
		if c.ID != name {
			return record{}, fmt.Errorf("record id %q does not match its key", c.ID)
		}
		return record{container: &c}, nil
	default:
		var h directory.Host
		if err := json.Unmarshal(value, &h); err != nil {
			return record{}, err
		}
		if h.Name != name {
			return record{}, fmt.Errorf("record name %q does not match its key", h.Name)
		}
		return record{host: &h}, nil
	}
}
