// Package ffspec says what a FreeFlow container gets in its OCI runtime
// configuration, whoever starts it: `freeflow run` (internal/container)
// and the runtime wrapper containerd runs for Kubernetes pods
// (internal/runtimewrap). Both add the same mounts and environment, so a
// pod sees the library and its agent where a CLI container does.
package ffspec

import (
	"strings"

	"github.com/freeflow-net/freeflow/internal/state"
)

// The network library is bind-mounted read-only into every FreeFlow
// container under /run (the host's copy may live anywhere, e.g. under
// /tmp, which containers do not see) and preloaded into every process
// through LD_PRELOAD.
const (
	LibraryName = "libfreeflow.so"
	// LibDir is where a container sees the library and the verbs provider.
	LibDir = "/run/freeflow-lib"
	// ContainerLibrary is where a container sees the library.
	ContainerLibrary = LibDir + "/" + LibraryName
	preloadKey       = "LD_PRELOAD="
)

// Mount is an OCI runtime configuration mount.
type Mount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type,omitempty"`
	Source      string   `json:"source,omitempty"`
	Options     []string `json:"options,omitempty"`
}

// AgentMount binds the host agent's socket directory at
// state.ContainerAgentDir, read-only: a container must not rename, unlink
// or replace the agent's socket and serve every container of its host
// itself (docs/ARCHITECTURE.md, "Identity and trust"). connect() needs no
// write access, and the agent, which writes the directory on the host
// side, still re-creates its socket there.
func AgentMount(hostDir string) Mount {
	return Mount{Destination: state.ContainerAgentDir, Type: "bind", Source: hostDir,
		Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}}
}

// LibraryMount binds the host's copy of the library at ContainerLibrary,
// read-only.
func LibraryMount(hostLib string) Mount {
	return Mount{Destination: ContainerLibrary, Type: "bind", Source: hostLib, Options: []string{"bind", "ro"}}
}

// Preload returns env with the library first in LD_PRELOAD: added to a
// preload the program already has (the library must see the socket calls
// before any other preloaded wrapper does), or as a new variable.
func Preload(env []string) []string {
	out := append([]string{}, env...)
	for i, kv := range out {
		if !strings.HasPrefix(kv, preloadKey) {
			continue
		}
		old := strings.TrimPrefix(kv, preloadKey)
		if old == "" {
			out[i] = preloadKey + ContainerLibrary
		} else if !preloads(old) {
			out[i] = preloadKey + ContainerLibrary + ":" + old
		}
		return out
	}
	return append(out, preloadKey+ContainerLibrary)
}

// preloads reports whether an LD_PRELOAD value (entries separated by
// colons or spaces, as ld.so reads it) already names the library.
func preloads(value string) bool {
	for _, e := range strings.FieldsFunc(value, func(r rune) bool { return r == ':' || r == ' ' }) {
		if e == ContainerLibrary {
			return true
		}
	}
	return false
}
