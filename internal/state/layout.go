// Package state names every file, directory and namespace a cluster owns and
// persists what the CLI needs to tear the cluster down again.
//
// Everything a cluster creates carries its name, so several clusters (for
// example parallel test runs) never collide: files live under
// /run/freeflow/<cluster>/ and every network namespace is "<cluster>-...".
// Interfaces are created inside the cluster's own namespaces, so their names
// need no prefix.
package state

import (
	"fmt"
	"path/filepath"
	"regexp"
)

// BaseDir holds one directory per cluster.
const BaseDir = "/run/freeflow"

// DefaultCluster is the cluster name used when --cluster is not given.
const DefaultCluster = "ff"

// ContainerAgentDir is where a container sees its host agent's socket
// directory (the library connects to ContainerAgentDir/agent.sock).
const ContainerAgentDir = "/run/freeflow"

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,7}$`)
var containerNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,30}$`)

// ValidClusterName reports an error unless name is a short lower-case word;
// it becomes part of namespace names, which must stay short and unique.
func ValidClusterName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("invalid cluster name %q: use 1-8 lower-case letters or digits, starting with a letter", name)
	}
	return nil
}

// ValidContainerName reports an error unless name can be a host name and
// part of a namespace name.
func ValidContainerName(name string) error {
	if !containerNameRE.MatchString(name) {
		return fmt.Errorf("invalid container name %q: use up to 31 lower-case letters, digits or '-', starting with a letter", name)
	}
	return nil
}

// Layout maps a cluster name to the paths and namespace names it owns.
type Layout struct {
	Cluster string
	Base    string // BaseDir unless a test overrides it
}

// NewLayout returns the layout of cluster under BaseDir.
func NewLayout(cluster string) Layout { return Layout{Cluster: cluster, Base: BaseDir} }

func (l Layout) Dir() string             { return filepath.Join(l.Base, l.Cluster) }
func (l Layout) StateFile() string       { return filepath.Join(l.Dir(), "cluster.json") }
func (l Layout) LockFile() string        { return filepath.Join(l.Dir(), "lock") }
func (l Layout) LogDir() string          { return filepath.Join(l.Dir(), "log") }
func (l Layout) HostsFile() string       { return filepath.Join(l.Dir(), "etc-hosts") }
func (l Layout) CrunRoot() string        { return filepath.Join(l.Dir(), "crun") }
func (l Layout) EtcdDir() string         { return filepath.Join(l.Dir(), "etcd") }
func (l Layout) HostDir(h string) string { return filepath.Join(l.Dir(), "hosts", h) }
func (l Layout) RuncRoot() string        { return filepath.Join(l.Dir(), "runc") }

// AgentSockDir is bind-mounted into each container of host h at
// ContainerAgentDir; mounting the directory rather than the socket keeps the
// mount valid when a restarted agent re-creates its socket.
func (l Layout) AgentSockDir(h string) string { return filepath.Join(l.HostDir(h), "sock") }
func (l Layout) AgentSocket(h string) string  { return filepath.Join(l.AgentSockDir(h), "agent.sock") }

// AdminSocket is the agent's root-only control socket (CNI plugin, CLI); it is
// never mounted into containers.
func (l Layout) AdminSocket(h string) string { return filepath.Join(l.HostDir(h), "admin.sock") }
func (l Layout) CNIConfDir(h string) string  { return filepath.Join(l.HostDir(h), "cni") }
func (l Layout) ContainerDir(name string) string {
	return filepath.Join(l.Dir(), "containers", name)
}

// Network namespace names (files under /run/netns).
func (l Layout) FabricNetNS() string               { return l.Cluster + "-fabric" }
func (l Layout) HostNetNS(h string) string         { return l.Cluster + "-" + h }
func (l Layout) ContainerNetNS(name string) string { return l.Cluster + "-c-" + name }

// MigrationNetNS is container name's network namespace on the host it
// migrates to, until the migration succeeds and it takes ContainerNetNS's
// name.
func (l Layout) MigrationNetNS(name string) string { return l.Cluster + "-m-" + name }

// MigrationDir holds container name's CRIU images (a tmpfs) while it migrates.
func (l Layout) MigrationDir(name string) string { return filepath.Join(l.Dir(), "migrate", name) }

// NetNSPath is the file a named network namespace is bound to.
func NetNSPath(name string) string { return filepath.Join("/run/netns", name) }
