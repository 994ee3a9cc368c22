package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Phase tells how far `cluster up` got; a cluster left in PhaseCreating
// (the CLI died halfway) is still torn down completely by `cluster down`.
type Phase string

const (
	PhaseCreating Phase = "creating"
	PhaseUp       Phase = "up"
)

// Cluster is the CLI's persisted view of one cluster (cluster.json).
type Cluster struct {
	Name    string `json:"name"`
	Phase   Phase  `json:"phase"`
	Hosts   []Host `json:"hosts"`
	Etcd    Etcd   `json:"etcd"`
	Created string `json:"created"`
	// NoAgents: `cluster up --no-agents` started no freeflowd; something
	// else runs the agents (on Kubernetes, FreeFlow's DaemonSet).
	NoAgents bool `json:"no_agents,omitempty"`
}

// Host is one simulated host: a network namespace on the fabric.
type Host struct {
	Name     string `json:"name"`      // h1, h2, ...
	Index    int    `json:"index"`     // 1-based
	FabricIP string `json:"fabric_ip"` // address on the fabric bridge
	Subnet   string `json:"subnet"`    // container subnet (CIDR)
	Gateway  string `json:"gateway"`   // bridge address in Subnet
	VTEPMAC  string `json:"vtep_mac"`  // MAC of the host's VXLAN device
	AgentPID int    `json:"agent_pid"`
}

// Etcd says where the directory lives; Managed means the CLI started it and
// must stop it on `cluster down`.
type Etcd struct {
	Endpoints []string `json:"endpoints"`
	Managed   bool     `json:"managed"`
	PID       int      `json:"pid"`
}

// Container is the CLI's record of a container it started.
type Container struct {
	Name     string   `json:"name"`
	ID       string   `json:"id"` // crun id, also the directory id
	Host     string   `json:"host"`
	IP       string   `json:"ip"`
	Tenant   string   `json:"tenant"`
	PID      int      `json:"pid"`
	FreeFlow bool     `json:"freeflow"`
	NoShm    bool     `json:"no_shm,omitempty"`  // --no-shm
	NoRDMA   bool     `json:"no_rdma,omitempty"` // no verbs device: --no-rdma or --no-freeflow
	Args     []string `json:"args"`
	Detached bool     `json:"detached"`
	// Set by `freeflow migrate`: Home is the host whose subnet (and CNI
	// address pool) holds IP; Restored says the processes are CRIU's, not
	// crun's, and Started is the init's start time (/proc/PID/stat field
	// 22), so a reused PID is not taken for it.
	Home     string `json:"home,omitempty"`
	Restored bool   `json:"restored,omitempty"`
	Started  uint64 `json:"started,omitempty"`
	// Namespaces of the restored init (kind -> inode), as restored: exec
	// enters these or none (the init may make new ones, of its choosing).
	Namespaces map[string]uint64 `json:"namespaces,omitempty"`
}

// Host returns the host called name, or an error naming the known hosts.
func (c *Cluster) Host(name string) (*Host, error) {
	for i := range c.Hosts {
		if c.Hosts[i].Name == name {
			return &c.Hosts[i], nil
		}
	}
	known := make([]string, 0, len(c.Hosts))
	for _, h := range c.Hosts {
		known = append(known, h.Name)
	}
	return nil, fmt.Errorf("unknown host %q in cluster %q (hosts: %v)", name, c.Name, known)
}

// ErrNoCluster is returned by LoadCluster when the cluster does not exist.
var ErrNoCluster = errors.New("cluster does not exist")

// LoadCluster reads cluster.json.
func (l Layout) LoadCluster() (*Cluster, error) {
	var c Cluster
	if err := readJSON(l.StateFile(), &c); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("cluster %q: %w (run `freeflow cluster up` first)", l.Cluster, ErrNoCluster)
		}
		return nil, err
	}
	return &c, nil
}

// SaveCluster writes cluster.json atomically.
func (l Layout) SaveCluster(c *Cluster) error { return writeJSON(l.StateFile(), c) }

// LoadContainer reads a container record.
func (l Layout) LoadContainer(name string) (*Container, error) {
	var c Container
	if err := readJSON(filepath.Join(l.ContainerDir(name), "container.json"), &c); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("no container %q in cluster %q", name, l.Cluster)
		}
		return nil, err
	}
	return &c, nil
}

// SaveContainer writes a container record atomically.
func (l Layout) SaveContainer(c *Container) error {
	return writeJSON(filepath.Join(l.ContainerDir(c.Name), "container.json"), c)
}

// Containers lists every container record of the cluster, sorted by name.
func (l Layout) Containers() ([]Container, error) {
	dirs, err := os.ReadDir(filepath.Join(l.Dir(), "containers"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Container
	for _, d := range dirs {
		c, err := l.LoadContainer(d.Name())
		if err != nil {
			continue // half-created: its directory is removed by rm/down
		}
		out = append(out, *c)
	}
	return out, nil
}

// Lock takes the cluster's exclusive lock (flock), creating the cluster
// directory if needed; call the returned function to release it. Every
// command that changes cluster state holds it, so parallel CLI calls on one
// cluster serialise while different clusters proceed independently.
func (l Layout) Lock() (func(), error) {
	if err := os.MkdirAll(l.Dir(), 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", l.Dir(), err)
	}
	f, err := os.OpenFile(l.LockFile(), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", l.LockFile(), err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", l.LockFile(), err)
	}
	return func() { unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	return os.Rename(tmp, path)
}
