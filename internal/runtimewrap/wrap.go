// Package runtimewrap is freeflow-runtime, the OCI runtime containerd runs
// for Kubernetes pods instead of runc (a runtime handler whose BinaryName
// it is): on `create` (and `run`) it gives the container what `freeflow
// run` gives a FreeFlow container (internal/ffspec: the library preloaded
// from a read-only bind, the agent's socket directory read-only), then
// execs the real runtime with the same arguments. Every other subcommand
// goes straight through. Pods need no change to their specs; a pod opts
// out with the annotation freeflow.io/fast-path: "off", which containerd
// copies into each container's OCI configuration when the handler lists
// it in pod_annotations (docs/KUBERNETES-DEPLOY.md).
//
// The wrapper changes config.json before runc reads it, and only by
// writing a whole new file and renaming it over the old one: a spec it
// cannot read or a library that is missing is an error, and the bundle is
// left as it was.
package runtimewrap

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// ConfigName is the wrapper's configuration, next to its executable
// (`freeflowd install` writes both).
const ConfigName = "freeflow-runtime.json"

// Config is what the wrapper needs to know about its node.
type Config struct {
	// Runtime is the real OCI runtime (runc); "" looks runc up in PATH.
	Runtime string `json:"runtime,omitempty"`
	// Library is the node's copy of libfreeflow.so.
	Library string `json:"library"`
	// AgentSockDir is the node agent's library-socket directory.
	AgentSockDir string `json:"agentSockDir"`
	// Provider is the node's copy of the verbs provider; "" gives no
	// container a verbs device.
	Provider string `json:"provider,omitempty"`
}

// LoadConfig reads the configuration at path.
func LoadConfig(path string) (Config, error) {
	var c Config
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("read the wrapper's configuration: %w (`freeflowd install` writes it)", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("parse %s: %w", path, err)
	}
	if c.Library == "" || c.AgentSockDir == "" {
		return c, fmt.Errorf("%s: needs \"library\" and \"agentSockDir\" (`freeflowd install` writes both)", path)
	}
	return c, nil
}

// Prepare does what the wrapper does before the real runtime runs, for
// the runc command line args (without the program name) and the
// configuration at cfgPath, and returns the runtime to exec. For create and
// run it gives the bundle's container FreeFlow (Give), for exec the process
// run in such a container (giveExec); a configuration it
// cannot read is then an error for a container that would get FreeFlow.
// Anything else only needs the runtime: without a configuration that is
// runc from PATH, so sandboxes, opted-out pods (the agent's own among
// them, which installs the configuration) and containers made before still
// start, stop and go.
func Prepare(args []string, cfgPath string) (string, error) {
	cfg, cfgErr := LoadConfig(cfgPath)
	c := parseArgs(args)
	if c.sub == "create" || c.sub == "run" {
		if err := Give(c.bundle(), func() (Config, error) { return cfg, cfgErr }); err != nil {
			return "", err
		}
	}
	runtime, err := runtimePath(cfg.Runtime)
	if err == nil && c.sub == "exec" {
		err = giveExec(c, runtime)
	}
	return runtime, err
}

func runtimePath(configured string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	p, err := exec.LookPath("runc")
	if err != nil {
		return "", fmt.Errorf("find the OCI runtime to run: %w (set \"runtime\" in %s)", err, ConfigName)
	}
	return p, nil
}

// Exec replaces the process with runtime, given the same arguments.
func Exec(runtime string, args []string) error {
	err := syscall.Exec(runtime, append([]string{runtime}, args...), os.Environ())
	return fmt.Errorf("run %s: %w", runtime, err)
}

// Main is the program: Prepare, then Exec. It returns only on failure.
func Main(args []string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the wrapper's own executable, next to which %s lives: %w", ConfigName, err)
	}
	runtime, err := Prepare(args, filepath.Join(filepath.Dir(exe), ConfigName))
	if err != nil {
		return err
	}
	return Exec(runtime, args)
}
