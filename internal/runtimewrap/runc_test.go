package runtimewrap

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/ffspec"
	"github.com/freeflow-net/freeflow/internal/state"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// TestWrapperRunsContainerWithLibrary runs a real container through the
// built freeflow-runtime with runc behind it, as containerd's shim would:
// its processes have the library preloaded (mapped, not just named in
// LD_PRELOAD) and see the agent's socket directory, read-only.
func TestWrapperRunsContainerWithLibrary(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (runc)")
	}
	if missing := testenv.Missing("unshare", "mount"); missing != "" {
		t.Skip(missing)
	}
	bundle := runcBundle(t)
	bin, err := testenv.BuildBinaries()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	sock := filepath.Join(t.TempDir(), "sock")
	if err := os.Mkdir(sock, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(sock, "agent.sock"), nil, 0o644) // a file the container must see
	runc, _ := exec.LookPath("runc")
	cfg, _ := json.Marshal(Config{Runtime: runc, Library: filepath.Join(bin, ffspec.LibraryName), AgentSockDir: sock})
	if err := os.WriteFile(filepath.Join(bin, ConfigName), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	script := `echo "preload=$LD_PRELOAD"; grep -q ` + ffspec.LibraryName + ` /proc/self/maps && echo mapped
ls ` + state.ContainerAgentDir + `; touch ` + state.ContainerAgentDir + `/x 2>/dev/null || echo read-only`
	rootfsSpec(t, bundle, script)

	out := runContainer(t, filepath.Join(bin, "freeflow-runtime"), bundle)
	for _, want := range []string{"preload=" + ffspec.ContainerLibrary, "mapped", "agent.sock", "read-only"} {
		if !strings.Contains(out, want) {
			t.Errorf("container output lacks %q:\n%s", want, out)
		}
	}
}

// rootfsSpec makes the bundle's container run script in the machine's
// root file system, read-only (runContainer binds it), with a private
// /run where the mount points for FreeFlow's binds can be made.
func rootfsSpec(t *testing.T, bundle, script string) {
	t.Helper()
	editSpec(t, bundle, func(s map[string]any) {
		p := s["process"].(map[string]any)
		p["terminal"] = false
		p["args"] = []string{"sh", "-c", script}
		s["mounts"] = append(s["mounts"].([]any),
			map[string]any{"destination": "/run", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "nodev", "mode=755"}})
	})
	if err := os.MkdirAll(filepath.Join(bundle, "rootfs"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// runContainer runs the bundle's container to its end with `runtime run`,
// in a private mount namespace where / is bound read-only at the bundle's
// rootfs (nothing stays mounted once it ends), and returns its output.
func runContainer(t *testing.T, runtime, bundle string) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "runc")
	id := testenv.RandomName("ffrt", 6)
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c",
		`mount --bind / "$1/rootfs" && mount -o remount,bind,ro "$1/rootfs" && shift && exec "$@"`,
		"sh", bundle, runtime, "--root", root, "run", "--bundle", bundle, id)
	t.Cleanup(func() { exec.Command("runc", "--root", root, "delete", "--force", id).Run() })
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s run: %v\n%s", runtime, err, out)
	}
	return string(out)
}
