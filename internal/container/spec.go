package container

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/freeflow-net/freeflow/internal/ffspec"
	"github.com/freeflow-net/freeflow/internal/state"
	"golang.org/x/sys/unix"
)

// The OCI runtime configuration (config.json), reduced to the fields we set.
type ociSpec struct {
	Version  string         `json:"ociVersion"`
	Process  ociProcess     `json:"process"`
	Root     ociRoot        `json:"root"`
	Hostname string         `json:"hostname"`
	Mounts   []ffspec.Mount `json:"mounts"`
	Linux    ociLinux       `json:"linux"`
}

type ociProcess struct {
	Terminal     bool            `json:"terminal"`
	User         ociUser         `json:"user"`
	Args         []string        `json:"args"`
	Env          []string        `json:"env"`
	Cwd          string          `json:"cwd"`
	Capabilities ociCapabilities `json:"capabilities"`
	Rlimits      []ociRlimit     `json:"rlimits"`
}

type ociUser struct {
	UID int `json:"uid"`
	GID int `json:"gid"`
}

type ociCapabilities struct {
	Bounding  []string `json:"bounding"`
	Effective []string `json:"effective"`
	Permitted []string `json:"permitted"`
}

type ociRlimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type ociRoot struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly"`
}

type ociLinux struct {
	Namespaces    []ociNamespace `json:"namespaces"`
	MaskedPaths   []string       `json:"maskedPaths"`
	ReadonlyPaths []string       `json:"readonlyPaths"`
}

type ociNamespace struct {
	Type string `json:"type"`
	Path string `json:"path,omitempty"`
}

// containerCaps is Docker's default capability set, enough for ordinary
// servers, without CAP_NET_ADMIN or CAP_SYS_ADMIN, and without Docker's
// CAP_NET_RAW: since Linux 5.17 it lets a process change SO_MARK, so a
// container holding it could free a fabric socket its agent hands it from
// the fabric guard (docs/PROTOCOL.md, "What a handed fabric socket can
// reach"), and the agent would hand it none. Raw sockets (ping) are not
// available in a container.
var containerCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// maxNofile is the RLIMIT_NOFILE containers get (servers under benchmark
// open many sockets), capped at the caller's hard limit: without
// CAP_SYS_RESOURCE (as in some sandboxes) crun cannot raise it further.
const maxNofile = 1048576

func nofile() uint64 {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil && lim.Max < maxNofile {
		return lim.Max
	}
	return maxNofile
}

// baseEnv is every container's environment before --env.
var baseEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/root", "TERM=xterm",
}

// newSpec returns the runtime configuration of container c: the host's
// root file system read-only, private /tmp, /dev/shm and /run, the host
// agent's socket directory at /run/freeflow (read-only) and the cluster's
// hosts file.
func newSpec(l state.Layout, c *state.Container, env []string) ociSpec {
	return ociSpec{
		Version: "1.0.2",
		Process: ociProcess{
			User: ociUser{}, Args: c.Args, Env: append(append([]string{}, baseEnv...), env...), Cwd: "/",
			Capabilities: ociCapabilities{Bounding: containerCaps, Effective: containerCaps, Permitted: containerCaps},
			Rlimits:      []ociRlimit{{Type: "RLIMIT_NOFILE", Hard: nofile(), Soft: nofile()}},
		},
		Root:     ociRoot{Path: "rootfs", Readonly: true},
		Hostname: c.Name,
		Mounts:   mounts(l, c.Host),
		Linux: ociLinux{
			Namespaces: []ociNamespace{{Type: "pid"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"},
				{Type: "network", Path: state.NetNSPath(l.ContainerNetNS(c.Name))}},
			MaskedPaths: []string{"/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
				"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware"},
			ReadonlyPaths: []string{"/proc/asound", "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
}

func mounts(l state.Layout, host string) []ffspec.Mount {
	return []ffspec.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts",
			Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=256m"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}},
		// A private /run hides the cluster's state under /run/freeflow.
		{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=755"}},
		ffspec.AgentMount(l.AgentSockDir(host)),
		{Destination: "/etc/hosts", Type: "bind", Source: l.HostsFile(), Options: []string{"bind", "ro"}},
	}
}

// writeBundle writes config.json and the (empty) rootfs mount point.
func writeBundle(dir string, spec ociSpec) error {
	if err := os.MkdirAll(filepath.Join(dir, "rootfs"), 0o755); err != nil {
		return fmt.Errorf("create bundle %s: %w", dir, err)
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		return fmt.Errorf("write bundle %s: %w", dir, err)
	}
	return nil
}
