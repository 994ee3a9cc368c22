package nodeinstall

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/freeflow-net/freeflow/internal/ffspec"
	"github.com/freeflow-net/freeflow/internal/runtimewrap"
)

// testNode makes a node's directories under a temporary root, the files
// to install, and the standard plugins FreeFlow chains after.
func testNode(t *testing.T) Options {
	t.Helper()
	root := t.TempDir()
	o := Options{From: filepath.Join(root, "image"), CNIBinDir: filepath.Join(root, "opt/cni/bin"),
		CNIConfDir: filepath.Join(root, "etc/cni/net.d"), Dir: filepath.Join(root, "opt/freeflow"),
		ContainerdConfig: filepath.Join(root, "etc/containerd/config.toml"), Cluster: "ff", Node: "node1",
		PodCIDR: "10.244.3.0/24", Routes: []string{"0.0.0.0/0"}, AgentSockDir: filepath.Join(root, "run/freeflow/sock"),
		AdminSocket: filepath.Join(root, "run/freeflow/admin.sock"), Out: &bytes.Buffer{}}
	for _, d := range []string{o.From, o.CNIBinDir, o.CNIConfDir, o.Dir, filepath.Dir(o.ContainerdConfig)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(o.ContainerdConfig, []byte(nodeContainerdConfig), 0o600)
	for _, f := range []string{pluginBin, wrapperBin, ffspec.LibraryName, ffspec.ProviderName} {
		os.WriteFile(filepath.Join(o.From, f), []byte("contents of "+f), 0o755)
	}
	for _, p := range []string{"bridge", "host-local"} {
		os.WriteFile(filepath.Join(o.CNIBinDir, p), []byte("plugin"), 0o755)
	}
	return o
}

// TestInstallWritesNodeFiles: the plugin, library, provider and wrapper
// are copied, the wrapper's configuration names the copied library and the
// agent's directory, and the network configuration list puts pods on the
// node's pod CIDR, chained with freeflow-cni naming the node's agent.
func TestInstallWritesNodeFiles(t *testing.T) {
	o := testNode(t)
	if err := Install(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{
		{filepath.Join(o.CNIBinDir, pluginBin), 0o755}, {filepath.Join(o.Dir, wrapperBin), 0o755},
		{filepath.Join(o.Dir, ffspec.LibraryName), 0o644}, {filepath.Join(o.Dir, ffspec.ProviderName), 0o644},
	} {
		b, err := os.ReadFile(f.path)
		if err != nil || !strings.HasPrefix(string(b), "contents of "+filepath.Base(f.path)) {
			t.Errorf("%s: %q, %v", f.path, b, err)
		}
		if st, err := os.Stat(f.path); err == nil && st.Mode().Perm() != f.mode {
			t.Errorf("%s: mode %v, want %v", f.path, st.Mode().Perm(), f.mode)
		}
	}
	cfg, err := runtimewrap.LoadConfig(filepath.Join(o.Dir, runtimewrap.ConfigName))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Library != filepath.Join(o.Dir, ffspec.LibraryName) || cfg.Provider != filepath.Join(o.Dir, ffspec.ProviderName) ||
		cfg.AgentSockDir != o.AgentSockDir {
		t.Errorf("wrapper configuration %+v", cfg)
	}
	if st, err := os.Stat(o.AgentSockDir); err != nil || !st.IsDir() {
		t.Errorf("agent socket directory: %v", err)
	}
	checkConfList(t, o)
	conf, err := os.ReadFile(o.ContainerdConfig)
	if err != nil || !bytes.HasPrefix(conf, []byte(nodeContainerdConfig)) ||
		!bytes.Contains(conf, []byte(`BinaryName = "`+filepath.Join(o.Dir, wrapperBin)+`"`)) ||
		!bytes.Contains(conf, []byte(`pod_annotations = ["freeflow.io/fast-path"]`)) {
		t.Errorf("containerd's configuration %v:\n%s", err, conf)
	}
	if st, _ := os.Stat(o.ContainerdConfig); st == nil || st.Mode().Perm() != 0o600 {
		t.Errorf("containerd's configuration changed its mode: %v", st)
	}
}

// nodeContainerdConfig is a node's containerd configuration (version 2)
// with settings of its own in the CRI plugin's section.
const nodeContainerdConfig = `version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.example/pause:3.9"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
`

func checkConfList(t *testing.T, o Options) {
	t.Helper()
	list, err := libcni.ConfListFromFile(filepath.Join(o.CNIConfDir, ConfListName))
	if err != nil {
		t.Fatalf("libcni cannot load the list: %v", err)
	}
	if len(list.Plugins) != 2 || list.Plugins[0].Network.Type != "bridge" || list.Plugins[1].Network.Type != pluginBin {
		t.Fatalf("plugins %+v", list.Plugins)
	}
	var bridge struct {
		IPAM struct {
			Ranges [][]struct{ Subnet, Gateway string }
			Routes []struct{ Dst, GW string }
		}
	}
	json.Unmarshal(list.Plugins[0].Bytes, &bridge)
	r := bridge.IPAM.Ranges
	if len(r) != 1 || len(r[0]) != 1 || r[0][0].Subnet != "10.244.3.0/24" || r[0][0].Gateway != "10.244.3.1" {
		t.Errorf("host-local ranges %+v, want 10.244.3.0/24 via 10.244.3.1", r)
	}
	if rt := bridge.IPAM.Routes; len(rt) != 1 || rt[0].Dst != "0.0.0.0/0" || rt[0].GW != "10.244.3.1" {
		t.Errorf("routes %+v", rt)
	}
	var ff struct{ AgentSocket, Host, Cluster string }
	json.Unmarshal(list.Plugins[1].Bytes, &ff)
	if ff.AgentSocket != o.AdminSocket || ff.Host != "node1" || ff.Cluster != "ff" {
		t.Errorf("freeflow entry %+v", ff)
	}
}

// TestInstallIsIdempotent: run again, the installer rewrites nothing (the
// same files, by inode); with a new library it replaces that file alone,
// by a new file, so a running container keeps mapping the old one.
func TestInstallIsIdempotent(t *testing.T) {
	o := testNode(t)
	if err := Install(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(o.Dir, ffspec.LibraryName)
	old, _ := os.Stat(lib)
	out := &bytes.Buffer{}
	o.Out = out
	if err := Install(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "wrote") {
		t.Errorf("second run wrote files:\n%s", out)
	}
	os.WriteFile(filepath.Join(o.From, ffspec.LibraryName), []byte("a new library"), 0o644)
	out.Reset()
	if err := Install(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if strings.Count(out.String(), "wrote") != 1 || !strings.Contains(out.String(), "wrote "+lib) {
		t.Errorf("after a new library, wrote:\n%s", out)
	}
	if now, _ := os.Stat(lib); os.SameFile(old, now) {
		t.Error("the library was rewritten in place, not replaced by a new file")
	}
	if left, _ := filepath.Glob(filepath.Join(o.Dir, ".*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestInstallRefusesMissingDir: a host directory the DaemonSet did not
// mount, a missing standard plugin or file to install: a clear error and
// nothing written anywhere.
func TestInstallRefusesMissingDir(t *testing.T) {
	cases := []struct {
		name string
		edit func(o *Options)
		want string
	}{
		{"cni bin", func(o *Options) { os.RemoveAll(o.CNIBinDir) }, "CNI bin directory"},
		{"cni conf", func(o *Options) { os.RemoveAll(o.CNIConfDir) }, "CNI configuration directory"},
		{"freeflow", func(o *Options) { os.RemoveAll(o.Dir) }, "FreeFlow directory"},
		{"containerd", func(o *Options) { os.RemoveAll(filepath.Dir(o.ContainerdConfig)) }, "containerd configuration directory"},
		{"bridge", func(o *Options) { os.Remove(filepath.Join(o.CNIBinDir, "bridge")) }, "containernetworking-plugins"},
		{"library", func(o *Options) { os.Remove(filepath.Join(o.From, ffspec.LibraryName)) }, ffspec.LibraryName},
		{"node", func(o *Options) { o.Node = "" }, "NODE_NAME"},
		{"pod cidr", func(o *Options) { o.PodCIDR = "10.244.3.0" }, "IPv4 prefix"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := testNode(t)
			c.edit(&o)
			err := Install(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Install: %v, want an error saying %q", err, c.want)
			}
			for _, d := range []string{o.CNIConfDir, o.Dir} {
				if e, _ := os.ReadDir(d); len(e) > 0 {
					t.Errorf("%s written: %v", d, e)
				}
			}
			if b, err := os.ReadFile(o.ContainerdConfig); err == nil && string(b) != nodeContainerdConfig {
				t.Errorf("containerd's configuration written:\n%s", b)
			}
		})
	}
}

// TestInstallReadsPodCIDRFromAPI: without --pod-cidr the installer reads the
// node's pod CIDR from the API server the way a pod does (service account
// token and CA), and says so clearly when the node has none yet.
func TestInstallReadsPodCIDRFromAPI(t *testing.T) {
	cidr := "10.244.7.0/24"
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" || r.URL.Path != "/api/v1/nodes/node1" {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"spec": map[string]any{"podCIDR": cidr, "podCIDRs": []string{"fd00::/64", cidr}}})
	}))
	defer srv.Close()
	host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	api := apiServer{Host: host, Port: port, SecretsDir: t.TempDir()}
	os.WriteFile(filepath.Join(api.SecretsDir, "token"), []byte("tok"), 0o600)
	os.WriteFile(filepath.Join(api.SecretsDir, "ca.crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644)
	got, err := nodePodCIDR(context.Background(), api, "node1")
	if err != nil || got != cidr {
		t.Fatalf("nodePodCIDR = %q, %v; want %s", got, err, cidr)
	}
	cidr = ""
	if _, err := nodePodCIDR(context.Background(), api, "node1"); err == nil || !strings.Contains(err.Error(), "no IPv4 pod CIDR yet") {
		t.Fatalf("node without a pod CIDR: %v", err)
	}
	if _, err := nodePodCIDR(context.Background(), api, "other"); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("refused read: %v", err)
	}
}

// TestRuntimeHandlerKeepsNodesCRISettings: containerd itself reads the
// handler "freeflow" (the wrapper as its runc, the opt-out annotation
// passed through) from the installed configuration, and keeps every
// setting of the node's own in the CRI section (its sandbox image, its
// OOM setting, its runc handler), which a drop-in import loses on
// containerd 1.6: its section would replace the node's whole.
func TestRuntimeHandlerKeepsNodesCRISettings(t *testing.T) {
	if _, err := exec.LookPath("containerd"); err != nil {
		t.Skip("containerd is not installed")
	}
	o := testNode(t)
	if err := Install(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("containerd", "--config", o.ContainerdConfig, "config", "dump").CombinedOutput()
	if err != nil {
		t.Fatalf("containerd config dump: %v\n%s", err, out)
	}
	for _, want := range []string{`runtimes.freeflow]`, `BinaryName = "` + filepath.Join(o.Dir, wrapperBin) + `"`, `"freeflow.io/fast-path"`,
		`sandbox_image = "registry.example/pause:3.9"`, `restrict_oom_score_adj = true`, `runtimes.runc]`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("containerd's configuration lacks %s:\n%s", want, out)
		}
	}
}

// TestRuntimeHandlerBlockReplaced: the installer's block is replaced, not
// added again, the node's own lines around it are kept byte for byte,
// and what it cannot edit safely is refused or skipped with the reason.
func TestRuntimeHandlerBlockReplaced(t *testing.T) {
	wrapper := "/opt/freeflow/freeflow-runtime"
	once, err := withHandler([]byte(nodeContainerdConfig), wrapper, false)
	if err != nil {
		t.Fatal(err)
	}
	edited := append(once, "# the admin's line after ours\n"...)
	twice, err := withHandler(edited, "/other/wrapper", true)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(twice), blockBegin); n != 1 {
		t.Errorf("%d blocks after a second install:\n%s", n, twice)
	}
	if !strings.HasPrefix(string(twice), nodeContainerdConfig+"# the admin's line after ours\n") ||
		!strings.Contains(string(twice), `BinaryName = "/other/wrapper"`) || strings.Contains(string(twice), wrapper) {
		t.Errorf("second install:\n%s", twice)
	}
	noNewline, err := withHandler([]byte("version = 2"), wrapper, false)
	if err != nil || !strings.HasPrefix(string(noNewline), "version = 2\n"+blockBegin+"\n") {
		t.Errorf("a file without its last newline: %v\n%s", err, noNewline)
	}
	for _, c := range []struct{ name, config, want string }{
		{"cut block", nodeContainerdConfig + blockBegin + "\n[x]\n", "without its end line"},
		{"own handler", nodeContainerdConfig + "[" + handlerTable + "]\n", "outside FreeFlow's block"},
		{"version 3", "version = 3\n", errNotVersion2.Error()},
		{"version 1", "[plugins.cri]\n", errNotVersion2.Error()},
	} {
		if _, err := withHandler([]byte(c.config), wrapper, false); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}

// TestInstallWithoutContainerdConfig: a node whose containerd runs on its
// defaults (no config.toml) or on another configuration version gets
// everything else, and the installer says what to do for the handler.
func TestInstallWithoutContainerdConfig(t *testing.T) {
	for _, c := range []struct{ name, config, want string }{
		{"none", "", "containerd config default >"},
		{"version 3", "version = 3\n", "add it by hand"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := testNode(t)
			os.Remove(o.ContainerdConfig)
			if c.config != "" {
				os.WriteFile(o.ContainerdConfig, []byte(c.config), 0o644)
			}
			out := &bytes.Buffer{}
			o.Out = out
			if err := Install(context.Background(), o); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), c.want) {
				t.Errorf("installer said:\n%s\nwant %q", out, c.want)
			}
			if b, _ := os.ReadFile(o.ContainerdConfig); string(b) != c.config {
				t.Errorf("containerd's configuration changed:\n%s", b)
			}
			checkConfList(t, o)
		})
	}
}
