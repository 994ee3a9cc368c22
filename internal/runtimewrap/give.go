package runtimewrap

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/freeflow-net/freeflow/internal/atomicfile"
	"github.com/freeflow-net/freeflow/internal/ffspec"
)

// OptOutAnnotation turns a pod's fast path off: "off" gives its containers
// nothing of FreeFlow's, "on" (or no annotation) everything.
const OptOutAnnotation = "freeflow.io/fast-path"

// sandboxAnnotations name a pod's sandbox (pause) container, per CRI
// runtime: containerd, CRI-O. A sandbox runs no program of the user's.
var sandboxAnnotations = map[string]string{
	"io.kubernetes.cri.container-type":  "sandbox",
	"io.kubernetes.cri-o.ContainerType": "sandbox",
}

// spec is config.json, kept whole: only the fields FreeFlow changes are
// decoded, everything else is written back as it was read.
type spec struct {
	top     map[string]json.RawMessage
	process map[string]json.RawMessage
	env     []string
	mounts  []json.RawMessage
}

// Give adds to the container of bundle what a FreeFlow container gets,
// unless it should get nothing (decide, hasGlibc); only then does it need the node's
// configuration, from load. It writes config.json only whole (a new file
// renamed over the old) and not at all on error or when there is nothing
// to add.
func Give(bundle string, load func() (Config, error)) error {
	path := filepath.Join(bundle, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read the container's OCI configuration: %w", err)
	}
	s, err := parseSpec(b)
	if err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	give, err := decide(s)
	if err != nil || !give || !hasGlibc(rootfs(bundle, s)) {
		return err
	}
	cfg, err := load()
	if err != nil {
		return err
	}
	if err := checkNode(cfg); err != nil {
		return err
	}
	if s.has(ffspec.ContainerLibrary) {
		return nil // given already (a create run again on the same bundle)
	}
	if err := dropNetRaw(s.process); err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	s.env = ffspec.Preload(s.env)
	for _, m := range []ffspec.Mount{ffspec.AgentMount(cfg.AgentSockDir), ffspec.LibraryMount(cfg.Library)} {
		raw, _ := json.Marshal(m) // a struct of strings: cannot fail
		s.mounts = append(s.mounts, raw)
	}
	if cfg.Provider != "" {
		if err := giveVerbs(s, bundle, cfg.Provider); err != nil {
			return err
		}
	}
	out, err := s.marshal()
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := atomicfile.Rewrite(path, out); err != nil {
		return fmt.Errorf("give the container FreeFlow: %w", err)
	}
	return nil
}

// netRaw lets a process change a socket's SO_MARK (since Linux 5.17), so
// a container given FreeFlow runs without it, as `freeflow run`'s do:
// else its agent hands it no fabric socket, for it could free one from
// the fabric guard (internal/agent/guard.go), and every connection to
// another node stays on the pod network. containerd grants it by
// default; a pod that needs raw sockets opts out of FreeFlow. A process
// that asked for CAP_NET_ADMIN keeps both: that one alone changes a mark,
// so its agent hands it no fabric socket anyway, and what it asked for
// them for (iptables-legacy in an init container) keeps working.
const (
	netRaw   = "CAP_NET_RAW"
	netAdmin = "CAP_NET_ADMIN"
)

// dropNetRaw removes netRaw from every capability set of an OCI process
// that holds no netAdmin.
func dropNetRaw(process map[string]json.RawMessage) error {
	var caps map[string][]string
	if err := decodeField(process, "capabilities", &caps); err != nil {
		return err
	}
	for _, list := range caps {
		if slices.Contains(list, netAdmin) {
			return nil
		}
	}
	changed := false
	for set, list := range caps {
		if kept := slices.DeleteFunc(slices.Clone(list), func(c string) bool { return c == netRaw }); len(kept) < len(list) {
			caps[set], changed = kept, true
		}
	}
	if !changed {
		return nil
	}
	var err error
	process["capabilities"], err = json.Marshal(caps)
	return err
}

func parseSpec(b []byte) (*spec, error) {
	s := &spec{}
	if err := json.Unmarshal(b, &s.top); err != nil {
		return nil, err
	}
	if s.top == nil {
		return nil, fmt.Errorf("not a JSON object")
	}
	if err := decodeField(s.top, "process", &s.process); err != nil {
		return nil, err
	}
	if s.process == nil {
		return nil, fmt.Errorf(`no "process": not an OCI runtime configuration`)
	}
	if err := decodeField(s.process, "env", &s.env); err != nil {
		return nil, err
	}
	if err := decodeField(s.top, "mounts", &s.mounts); err != nil {
		return nil, err
	}
	return s, nil
}

// decodeField decodes obj[key] into v when present.
func decodeField(obj map[string]json.RawMessage, key string, v any) error {
	raw, ok := obj[key]
	if !ok {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%q: %w", key, err)
	}
	return nil
}

// has reports whether some mount's destination is dst.
func (s *spec) has(dst string) bool {
	for _, raw := range s.mounts {
		var m ffspec.Mount
		if json.Unmarshal(raw, &m) == nil && filepath.Clean(m.Destination) == dst {
			return true
		}
	}
	return false
}

func (s *spec) marshal() ([]byte, error) {
	var err error
	set := func(obj map[string]json.RawMessage, key string, v any) {
		if err == nil {
			obj[key], err = json.Marshal(v)
		}
	}
	set(s.process, "env", s.env)
	set(s.top, "process", s.process)
	set(s.top, "mounts", s.mounts)
	if err != nil {
		return nil, err
	}
	return json.Marshal(s.top)
}

// decide reports whether the container gets FreeFlow: not a pod's sandbox,
// not a container in its host's network namespace (the agent serves only
// containers registered by their own namespace), not a pod that opted out.
// An opt-out annotation with another value than on or off is an error, so
// a typo does not leave a pod with a fast path it meant to turn off.
func decide(s *spec) (bool, error) {
	var ann map[string]string
	if err := decodeField(s.top, "annotations", &ann); err != nil {
		return false, err
	}
	for k, v := range sandboxAnnotations {
		if ann[k] == v {
			return false, nil
		}
	}
	switch v := ann[OptOutAnnotation]; v {
	case "off":
		return false, nil
	case "", "on":
	default:
		return false, fmt.Errorf("annotation %s is %q: use \"on\" or \"off\"", OptOutAnnotation, v)
	}
	return ownNetwork(s)
}

// glibcLoaders are where images keep glibc's dynamic loader (ld-linux*.so.*:
// x86-64, aarch64 and others), merged /usr or not, multiarch or not.
var glibcLoaders = []string{"lib/ld-linux*.so.*", "lib64/ld-linux*.so.*", "lib/*-linux-gnu*/ld-linux*.so.*",
	"usr/lib/ld-linux*.so.*", "usr/lib64/ld-linux*.so.*", "usr/lib/*-linux-gnu*/ld-linux*.so.*"}

// hasGlibc reports whether the image at rootfs runs programs through
// glibc's loader, the only one that loads the library (built against
// glibc): an image of static binaries ignores LD_PRELOAD, and musl's loader
// (Alpine) would try to load a glibc library into every program, so those
// get nothing.
func hasGlibc(rootfs string) bool {
	for _, pattern := range glibcLoaders {
		if m, _ := filepath.Glob(filepath.Join(rootfs, pattern)); len(m) > 0 {
			return true
		}
	}
	return false
}

// rootfs is the container's root file system (mounted by containerd
// before it runs create): root.path, relative to the bundle.
func rootfs(bundle string, s *spec) string {
	var root struct {
		Path string `json:"path"`
	}
	decodeField(s.top, "root", &root)
	if filepath.IsAbs(root.Path) {
		return root.Path
	}
	return filepath.Join(bundle, root.Path)
}

func ownNetwork(s *spec) (bool, error) {
	var linux struct {
		Namespaces []struct {
			Type string `json:"type"`
		} `json:"namespaces"`
	}
	if err := decodeField(s.top, "linux", &linux); err != nil {
		return false, err
	}
	for _, ns := range linux.Namespaces {
		if ns.Type == "network" {
			return true, nil
		}
	}
	return false, nil
}

// checkNode refuses to give a container a library the node does not have
// (a bind of a missing file fails inside runc with a message that names no
// cause), and makes the agent's socket directory if the agent has not yet
// (after a reboot, before the agent's pod runs): the agent makes its
// socket in the directory it finds, and a container bound to it sees the
// socket once it is there.
func checkNode(cfg Config) error {
	if st, err := os.Stat(cfg.Library); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("the FreeFlow library %s is missing on this node (run `freeflowd install`, or opt the pod out with the annotation %s: \"off\")", cfg.Library, OptOutAnnotation)
	}
	if err := os.MkdirAll(cfg.AgentSockDir, 0o755); err != nil {
		return fmt.Errorf("make the FreeFlow agent's socket directory: %w", err)
	}
	return nil
}
