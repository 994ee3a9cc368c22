package runtimewrap

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/freeflow-net/freeflow/internal/atomicfile"
	"github.com/freeflow-net/freeflow/internal/ffspec"
)

// giveExec preloads the library into, and drops CAP_NET_RAW from, a process `runc exec --process FILE
// ID` runs (kubectl exec) in a container that was given FreeFlow:
// containerd builds that process from the container's spec as it stored
// it, which does not have what the wrapper added to the bundle's copy.
// Whether the container has the library, the bundle's config.json says
// (runc state names the bundle). An exec runc cannot find the container
// of is left to runc, which says so.
func giveExec(c cmdline, runtime string) error {
	procFile, ok := c.flag("process", "p")
	if !ok || len(c.rest) == 0 {
		return nil // args and --env flags: runc keeps the container's environment
	}
	id := c.rest[len(c.rest)-1]
	out, err := exec.Command(runtime, append(append([]string{}, c.globals...), "state", id)...).Output()
	if err != nil {
		return nil
	}
	var st struct {
		Bundle string `json:"bundle"`
	}
	if json.Unmarshal(out, &st) != nil || st.Bundle == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(st.Bundle, "config.json"))
	if err != nil {
		return nil
	}
	s, err := parseSpec(b)
	if err != nil || !s.has(ffspec.ContainerLibrary) {
		return nil
	}
	return preloadProcess(procFile, s.has(ffspec.ContainerVerbs))
}

// preloadProcess adds the library to LD_PRELOAD in the process file path
// (an OCI process, JSON), and with verbs the device's environment; it is
// written whole.
func preloadProcess(path string, verbs bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read the exec's process: %w", err)
	}
	var p map[string]json.RawMessage
	var env []string
	if err := json.Unmarshal(b, &p); err != nil || p == nil {
		return fmt.Errorf("parse the exec's process %s: not a JSON object (%v)", path, err)
	}
	if err := decodeField(p, "env", &env); err != nil {
		return fmt.Errorf("parse the exec's process %s: %w", path, err)
	}
	if err := dropNetRaw(p); err != nil {
		return fmt.Errorf("parse the exec's process %s: %w", path, err)
	}
	env = ffspec.Preload(env)
	if verbs {
		env = append(env, ffspec.VerbsEnv()...)
	}
	if p["env"], err = json.Marshal(env); err != nil {
		return err
	}
	out, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return atomicfile.Rewrite(path, out)
}
