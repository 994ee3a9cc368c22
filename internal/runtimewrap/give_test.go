package runtimewrap

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/ffspec"
	"github.com/freeflow-net/freeflow/internal/state"
)

// runcBundle makes a bundle whose config.json is runc's own example
// (`runc spec`), as containerd's is in shape: a process, mounts, a
// network namespace of its own.
func runcBundle(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("runc is not installed (scripts/install-deps.sh installs it)")
	}
	dir := t.TempDir()
	if out, err := exec.Command("runc", "spec", "--bundle", dir).CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v: %s", err, out)
	}
	imageFile(t, dir, "lib64/ld-linux-x86-64.so.2") // a glibc image, as Debian's
	return dir
}

// imageFile makes an (empty) file at name in the bundle's root file system.
func imageFile(t *testing.T, bundle, name string) {
	t.Helper()
	path := filepath.Join(bundle, "rootfs", name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o755); err != nil {
		t.Fatal(err)
	}
}

// node makes what `freeflowd install` leaves on a node: the library and
// the agent's socket directory.
func node(t *testing.T) Config {
	t.Helper()
	dir := t.TempDir()
	cfg := Config{Library: filepath.Join(dir, ffspec.LibraryName), AgentSockDir: filepath.Join(dir, "sock")}
	if err := os.WriteFile(cfg.Library, []byte("ELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(cfg.AgentSockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// fixed loads cfg; a Library "" stands for a node without the wrapper's
// configuration.
func fixed(cfg Config) func() (Config, error) {
	return func() (Config, error) {
		if cfg.Library == "" {
			return LoadConfig(filepath.Join(os.TempDir(), "missing", ConfigName))
		}
		return cfg, nil
	}
}

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// editSpec changes the bundle's config.json with f.
func editSpec(t *testing.T, bundle string, f func(map[string]any)) {
	t.Helper()
	path := filepath.Join(bundle, "config.json")
	v := readJSON(t, path)
	f(v)
	b, _ := json.Marshal(v)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func annotate(k, v string) func(map[string]any) {
	return func(s map[string]any) { s["annotations"] = map[string]any{k: v} }
}

// unchanged fails unless config.json is byte for byte what it was and the
// bundle holds no other file than before.
func unchanged(t *testing.T, bundle string, give func() error) error {
	t.Helper()
	before, _ := os.ReadFile(filepath.Join(bundle, "config.json"))
	names := func() []string {
		e, _ := os.ReadDir(bundle)
		var n []string
		for _, x := range e {
			n = append(n, x.Name())
		}
		return n
	}
	files := names()
	err := give()
	if after, _ := os.ReadFile(filepath.Join(bundle, "config.json")); !bytes.Equal(before, after) {
		t.Errorf("config.json changed:\n%s", after)
	}
	if now := names(); !slices.Equal(now, files) {
		t.Errorf("bundle now holds %v, was %v", now, files)
	}
	return err
}

// TestGiveRuncSpec: runc's own spec gets the library preloaded from a
// read-only bind and the agent's socket directory read-only, and keeps
// every other field as it was.
func TestGiveRuncSpec(t *testing.T) {
	bundle, cfg := runcBundle(t), node(t)
	path := filepath.Join(bundle, "config.json")
	before := readJSON(t, path)
	if err := Give(bundle, fixed(cfg)); err != nil {
		t.Fatal(err)
	}
	after := readJSON(t, path)
	env := after["process"].(map[string]any)["env"].([]any)
	if !slices.Contains(env, any("LD_PRELOAD="+ffspec.ContainerLibrary)) {
		t.Errorf("env %v has no LD_PRELOAD of the library", env)
	}
	mounts := after["mounts"].([]any)
	want := []ffspec.Mount{ffspec.AgentMount(cfg.AgentSockDir), ffspec.LibraryMount(cfg.Library)}
	var got []ffspec.Mount
	b, _ := json.Marshal(mounts[len(mounts)-2:])
	json.Unmarshal(b, &got)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("last mounts %+v, want %+v", got, want)
	}
	for _, m := range got {
		if !slices.Contains(m.Options, "ro") {
			t.Errorf("mount %s is not read-only", m.Destination)
		}
	}
	if got[0].Destination != state.ContainerAgentDir {
		t.Errorf("agent directory at %s, want %s (where the library looks)", got[0].Destination, state.ContainerAgentDir)
	}
	// Everything else as runc wrote it.
	before["mounts"], after["mounts"] = nil, nil
	delete(before["process"].(map[string]any), "env")
	delete(after["process"].(map[string]any), "env")
	if !reflect.DeepEqual(before, after) {
		t.Errorf("other fields changed:\nbefore %v\nafter  %v", before, after)
	}
	// A create run again on the same bundle adds nothing more.
	if err := unchanged(t, bundle, func() error { return Give(bundle, fixed(cfg)) }); err != nil {
		t.Fatal(err)
	}
}

// TestGiveSandboxGetsNothing: a pod's pause container (containerd's and
// CRI-O's annotations), a pod that opted out, a container on its host's
// network, and an image without glibc's loader (static binaries, Alpine's
// musl) get nothing.
func TestGiveSandboxGetsNothing(t *testing.T) {
	spec := func(f func(map[string]any)) func(*testing.T, string) {
		return func(t *testing.T, bundle string) { editSpec(t, bundle, f) }
	}
	image := func(loader string) func(*testing.T, string) {
		return func(t *testing.T, bundle string) {
			os.RemoveAll(filepath.Join(bundle, "rootfs"))
			if loader != "" {
				imageFile(t, bundle, loader)
			}
		}
	}
	cases := map[string]func(*testing.T, string){
		"containerd sandbox": spec(annotate("io.kubernetes.cri.container-type", "sandbox")),
		"cri-o sandbox":      spec(annotate("io.kubernetes.cri-o.ContainerType", "sandbox")),
		"opted out":          spec(annotate(OptOutAnnotation, "off")),
		"static image":       image(""),
		"musl image":         image("lib/ld-musl-x86_64.so.1"),
		"host network": spec(func(s map[string]any) {
			linux := s["linux"].(map[string]any)
			var ns []any
			for _, n := range linux["namespaces"].([]any) {
				if n.(map[string]any)["type"] != "network" {
					ns = append(ns, n)
				}
			}
			linux["namespaces"] = ns
		}),
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			bundle, cfg := runcBundle(t), node(t)
			edit(t, bundle)
			if err := unchanged(t, bundle, func() error { return Give(bundle, fixed(cfg)) }); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestGiveBadInputLeavesSpec: a malformed config.json, a typo in the
// opt-out annotation, a node without the library or the agent's directory:
// a clear error, and the bundle exactly as it was.
func TestGiveBadInputLeavesSpec(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, bundle string, cfg *Config)
		want  string
	}{
		{"truncated json", func(t *testing.T, bundle string, _ *Config) {
			b, _ := os.ReadFile(filepath.Join(bundle, "config.json"))
			os.WriteFile(filepath.Join(bundle, "config.json"), b[:len(b)/2], 0o644)
		}, "unexpected end of JSON input"},
		{"env not strings", func(t *testing.T, bundle string, _ *Config) {
			editSpec(t, bundle, func(s map[string]any) { s["process"].(map[string]any)["env"] = 7 })
		}, `"env"`},
		{"no process", func(t *testing.T, bundle string, _ *Config) {
			os.WriteFile(filepath.Join(bundle, "config.json"), []byte(`{"ociVersion":"1.0.2"}`), 0o644)
		}, `no "process"`},
		{"annotation typo", func(t *testing.T, bundle string, _ *Config) {
			editSpec(t, bundle, annotate(OptOutAnnotation, "of"))
		}, `use "on" or "off"`},
		{"library missing", func(t *testing.T, _ string, cfg *Config) { os.Remove(cfg.Library) }, "library"},
		{"configuration missing", func(t *testing.T, _ string, cfg *Config) { cfg.Library = "" }, "freeflowd install"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bundle, cfg := runcBundle(t), node(t)
			c.setup(t, bundle, &cfg)
			err := unchanged(t, bundle, func() error { return Give(bundle, fixed(cfg)) })
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Give: %v, want an error saying %q", err, c.want)
			}
		})
	}
}

// TestPrepareNeedsConfigOnlyToGive: without its configuration the wrapper
// refuses to create a container that would get FreeFlow, but still creates
// a sandbox (the agent's own pod, which installs the configuration, needs
// one) and passes delete through, so containers made before can be removed.
func TestPrepareNeedsConfigOnlyToGive(t *testing.T) {
	bundle := runcBundle(t)
	missing := filepath.Join(t.TempDir(), ConfigName)
	if _, err := Prepare([]string{"--root", "/run/x", "create", "--bundle", bundle, "id"}, missing); err == nil ||
		!strings.Contains(err.Error(), "freeflowd install") {
		t.Fatalf("create without configuration: %v, want an error naming freeflowd install", err)
	}
	editSpec(t, bundle, annotate("io.kubernetes.cri.container-type", "sandbox"))
	for _, args := range [][]string{{"create", "--bundle", bundle, "id"}, {"--root", "/run/x", "delete", "id"}} {
		if rt, err := Prepare(args, missing); err != nil || filepath.Base(rt) != "runc" {
			t.Fatalf("%s without configuration: %q, %v; want runc", args[0], rt, err)
		}
	}
}

// TestGiveMakesAgentDirAfterReboot: after a reboot the agent's socket
// directory (on /run) is gone until the agent's pod runs; a pod created
// first still starts, bound to the directory the agent will use.
func TestGiveMakesAgentDirAfterReboot(t *testing.T) {
	bundle, cfg := runcBundle(t), node(t)
	os.Remove(cfg.AgentSockDir)
	if err := Give(bundle, fixed(cfg)); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(cfg.AgentSockDir); err != nil || !st.IsDir() {
		t.Fatalf("agent socket directory not made: %v", err)
	}
}

// TestGiveFindsGlibcWhereImagesKeepIt: Debian's multiarch loader (through
// its /lib64 link), a merged /usr, aarch64's name.
func TestGiveFindsGlibcWhereImagesKeepIt(t *testing.T) {
	for _, loader := range []string{"lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "usr/lib64/ld-linux-x86-64.so.2", "lib/ld-linux-aarch64.so.1"} {
		root := t.TempDir()
		os.MkdirAll(filepath.Join(root, filepath.Dir(loader)), 0o755)
		os.WriteFile(filepath.Join(root, loader), nil, 0o755)
		if !hasGlibc(root) {
			t.Errorf("no glibc found with %s", loader)
		}
	}
}

// TestDropNetRawKeepsNetAdminProcesses: CAP_NET_RAW goes from every set,
// every copy of it; a process that asked for CAP_NET_ADMIN keeps it (its
// agent hands it no fabric socket anyway, and iptables-legacy needs both).
func TestDropNetRawKeepsNetAdminProcesses(t *testing.T) {
	caps := func(p map[string]json.RawMessage) map[string][]string {
		var c map[string][]string
		json.Unmarshal(p["capabilities"], &c)
		return c
	}
	proc := func(list ...string) map[string]json.RawMessage {
		b, _ := json.Marshal(map[string][]string{"bounding": list, "permitted": list})
		return map[string]json.RawMessage{"capabilities": b}
	}
	p := proc("CAP_KILL", "CAP_NET_RAW", "CAP_NET_RAW")
	if err := dropNetRaw(p); err != nil {
		t.Fatal(err)
	}
	for set, list := range caps(p) {
		if !reflect.DeepEqual(list, []string{"CAP_KILL"}) {
			t.Errorf("%s: %v, want only CAP_KILL", set, list)
		}
	}
	p = proc("CAP_NET_ADMIN", "CAP_NET_RAW")
	if err := dropNetRaw(p); err != nil {
		t.Fatal(err)
	}
	for set, list := range caps(p) {
		if !slices.Contains(list, "CAP_NET_RAW") {
			t.Errorf("%s: %v lost CAP_NET_RAW though the process asked for CAP_NET_ADMIN", set, list)
		}
	}
}
