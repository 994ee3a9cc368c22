package runtimewrap

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/freeflow-net/freeflow/internal/ffspec"
	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/state"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// The built binaries (freeflow-runtime, the library), once for the package.
var built struct {
	once sync.Once
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// wrapper returns the built freeflow-runtime, configured like a node's:
// runc behind it, the built library, and an agent socket directory (with
// a file named agent.sock in it) of the test's.
func wrapper(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (runc)")
	}
	if missing := testenv.Missing("unshare", "mount"); missing != "" {
		t.Skip(missing)
	}
	built.once.Do(func() { built.dir, built.err = testenv.BuildBinaries() })
	if built.err != nil {
		t.Fatal(built.err)
	}
	sock := filepath.Join(t.TempDir(), "sock")
	if err := os.Mkdir(sock, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(sock, "agent.sock"), nil, 0o644)
	runc, _ := exec.LookPath("runc")
	cfg, _ := json.Marshal(Config{Runtime: runc, Library: filepath.Join(built.dir, ffspec.LibraryName),
		Provider: filepath.Join(built.dir, ffspec.ProviderName), AgentSockDir: sock})
	if err := os.WriteFile(filepath.Join(built.dir, ConfigName), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(built.dir, "freeflow-runtime")
}

// seesFreeFlow prints what a process of a FreeFlow container must see.
const seesFreeFlow = `echo "preload=$LD_PRELOAD"; grep -q ` + ffspec.LibraryName + ` /proc/self/maps && echo mapped
ls ` + state.ContainerAgentDir + `; touch ` + state.ContainerAgentDir + `/x 2>/dev/null || echo read-only`

func checkSeesFreeFlow(t *testing.T, out string) {
	t.Helper()
	for _, want := range []string{"preload=" + ffspec.ContainerLibrary, "mapped", "agent.sock", "read-only"} {
		if !strings.Contains(out, want) {
			t.Errorf("container output lacks %q:\n%s", want, out)
		}
	}
}

// TestWrapperRunsContainerWithLibrary runs a real container through the
// built freeflow-runtime with runc behind it, as containerd's shim would:
// its processes have the library preloaded (mapped, not just named in
// LD_PRELOAD) and see the agent's socket directory, read-only.
func TestWrapperRunsContainerWithLibrary(t *testing.T) {
	runtime, bundle := wrapper(t), runcBundle(t)
	rootfsSpec(t, bundle, seesFreeFlow)
	_, _, out := inRootfs(t, runtime, bundle, "run")
	checkSeesFreeFlow(t, string(out))
}

// TestWrapperExecGetsLibrary: a process run later in the container
// (kubectl exec: runc exec --process, the process containerd built from
// the spec it stored, without the library) is preloaded too.
func TestWrapperExecGetsLibrary(t *testing.T) {
	runtime, bundle := wrapper(t), runcBundle(t)
	checkSeesFreeFlow(t, execIn(t, runtime, bundle, seesFreeFlow))
}

// TestWrapperGivesVerbsDevice: a pod's container gets the virtual verbs
// device `freeflow run` gives (docs/VERBS.md), its identity from the
// pod's address in the network namespace the CNI plugins set up; Debian's
// libibverbs lists it, in the container's own process and in one exec'd.
func TestWrapperGivesVerbsDevice(t *testing.T) {
	runtime := wrapper(t)
	if missing := testenv.Missing("ip", "ibv_devices"); missing != "" {
		t.Skip(missing)
	}
	const script = "ibv_devices; cat $SYSFS_PATH/class/infiniband/ffv0/ports/1/lid"
	check := func(what, out string) {
		if !strings.Contains(out, "ffv0") || !strings.Contains(out, "0x905") {
			t.Errorf("%s: no device ffv0 with the LID of 10.244.9.5 (0x905):\n%s", what, out)
		}
	}
	bundle := runcBundle(t)
	rootfsSpec(t, bundle, script)
	podNetwork(t, bundle, "10.244.9.5/24")
	_, _, out := inRootfs(t, runtime, bundle, "run")
	check("container", string(out))

	bundle = runcBundle(t)
	podNetwork(t, bundle, "10.244.9.5/24")
	check("exec", execIn(t, runtime, bundle, script))
}

// TestWrapperDropsNetRaw: a container given FreeFlow, and a process
// exec'd in it, run without CAP_NET_RAW in any set (it would let them
// change a handed fabric socket's mark), though containerd's default
// grants it; the other capabilities stay.
func TestWrapperDropsNetRaw(t *testing.T) {
	runtime := wrapper(t)
	const script = "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status"
	caps := []string{"CAP_NET_RAW", "CAP_KILL", "CAP_NET_BIND_SERVICE"}
	check := func(what, out string) {
		t.Helper()
		sets := 0
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			name, hex, _ := strings.Cut(line, ":\t")
			v, err := strconv.ParseUint(hex, 16, 64)
			if err != nil {
				t.Fatalf("%s: %q", what, out)
			}
			if v&(1<<13) != 0 {
				t.Errorf("%s: %s has CAP_NET_RAW (%s)", what, name, hex)
			}
			if name != "CapInh" && name != "CapAmb" && v&(1<<5) == 0 {
				t.Errorf("%s: %s lost CAP_KILL (%s)", what, name, hex)
			}
			sets++
		}
		if sets != 5 {
			t.Fatalf("%s: %d capability sets in %q", what, sets, out)
		}
	}
	bundle := runcBundle(t)
	rootfsSpec(t, bundle, script)
	editSpec(t, bundle, func(s map[string]any) { s["process"].(map[string]any)["capabilities"] = capSets(caps) })
	_, _, out := inRootfs(t, runtime, bundle, "run")
	check("container", string(out))

	bundle = runcBundle(t)
	editSpec(t, bundle, func(s map[string]any) { s["process"].(map[string]any)["capabilities"] = capSets(caps) })
	check("exec", execIn(t, runtime, bundle, script, caps...))
}

// capSets is an OCI process's capabilities with caps in every set.
func capSets(caps []string) map[string][]string {
	return map[string][]string{"bounding": caps, "effective": caps, "inheritable": caps, "permitted": caps, "ambient": caps}
}

// podNetwork puts the bundle's container into a new network namespace with
// addr on its eth0, as the CNI plugins leave a pod's.
func podNetwork(t *testing.T, bundle, addr string) {
	t.Helper()
	ns := testenv.RandomName("ffrtv", 6)
	if err := netns.Create(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Delete(ns) })
	for _, args := range [][]string{{"link", "add", "eth0", "type", "veth", "peer", "name", "eth1"},
		{"addr", "add", addr, "dev", "eth0"}, {"link", "set", "eth0", "up"}} {
		if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	editSpec(t, bundle, func(s map[string]any) {
		for _, n := range s["linux"].(map[string]any)["namespaces"].([]any) {
			if n.(map[string]any)["type"] == "network" {
				n.(map[string]any)["path"] = netns.Path(ns)
			}
		}
	})
}

// execIn starts the bundle's container (a sleep) through runtime, runs
// script in it with `runtime exec --process` as containerd's shim does,
// with the bare environment containerd would give it (and caps in every
// capability set), and returns its output.
func execIn(t *testing.T, runtime, bundle, script string, caps ...string) string {
	t.Helper()
	rootfsSpec(t, bundle, "exec sleep 60")
	root, id, _ := inRootfs(t, runtime, bundle, "create")
	if out, err := exec.Command(runtime, "--root", root, "start", id).CombinedOutput(); err != nil {
		t.Fatalf("start: %v\n%s", err, out)
	}
	proc := filepath.Join(t.TempDir(), "process.json")
	process := map[string]any{"args": []string{"sh", "-c", script}, "cwd": "/",
		"env": []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, "user": map[string]int{"uid": 0, "gid": 0}}
	if len(caps) > 0 {
		process["capabilities"] = capSets(caps)
	}
	p, _ := json.Marshal(process)
	os.WriteFile(proc, p, 0o600)
	out, err := exec.Command(runtime, "--root", root, "exec", "--process", proc, id).CombinedOutput()
	if err != nil {
		t.Fatalf("exec: %v\n%s", err, out)
	}
	return string(out)
}

// rootfsSpec makes the bundle's container run script in the machine's
// root file system, read-only (inRootfs binds it), with a private
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

// inRootfs runs `runtime sub --bundle bundle ID` (run or create) in a
// private mount namespace where / is bound read-only at the bundle's
// rootfs (the container keeps its own copy of it; nothing stays mounted
// once it ends), and returns the runtime's root, the container's ID and
// the output. The output goes through a file: a created container's init
// keeps the runtime's stdout open. The container is deleted when the test
// ends.
func inRootfs(t *testing.T, runtime, bundle, sub string) (root, id string, out []byte) {
	t.Helper()
	dir := t.TempDir()
	root, id = filepath.Join(dir, "runc"), testenv.RandomName("ffrt", 6)
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c",
		`mount --bind / "$1/rootfs" && mount -o remount,bind,ro "$1/rootfs" && shift && exec "$@"`,
		"sh", bundle, runtime, "--root", root, sub, "--bundle", bundle, id)
	log, err := os.Create(filepath.Join(dir, "output"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	t.Cleanup(func() { exec.Command("runc", "--root", root, "delete", "--force", id).Run() })
	err = cmd.Run()
	out, _ = os.ReadFile(log.Name())
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", runtime, sub, err, out)
	}
	return root, id, out
}
