package deploy

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/nodeinstall"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// containerd is a private containerd (its own root, state and socket under
// a temporary directory), as on a node.
type containerd struct {
	dir, sock string
}

func startContainerd(t *testing.T) *containerd {
	t.Helper()
	c := &containerd{dir: t.TempDir()}
	c.sock = filepath.Join(c.dir, "containerd.sock")
	conf := filepath.Join(c.dir, "config.toml")
	os.WriteFile(conf, []byte(fmt.Sprintf("version = 2\nroot = %q\nstate = %q\n[grpc]\n  address = %q\n",
		filepath.Join(c.dir, "root"), filepath.Join(c.dir, "state"), c.sock)), 0o644)
	startLogged(t, exec.Command("containerd", "--config", conf), filepath.Join(c.dir, "containerd.log"))
	testenv.WaitFor(t, "containerd to serve", func() bool { return c.ctr("version") == nil })
	return c
}

func (c *containerd) ctr(args ...string) error {
	out, err := exec.Command("ctr", append([]string{"--address", c.sock, "-n", "k8s.io"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// TestImageInstallsOntoNode: `make image` makes an image containerd
// imports under the name the DaemonSet runs, and the image's freeflowd
// (static: no shell, no libc in the image) installs FreeFlow onto a node's
// directories from a real container, as the DaemonSet's init container.
func TestImageInstallsOntoNode(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (containerd)")
	}
	if missing := testenv.Missing("containerd", "ctr", "runc", "make", "/usr/lib/cni/bridge"); missing != "" {
		t.Skip(missing)
	}
	bin := t.TempDir()
	image := makeImage(t)
	if err := testenv.Make("image", bin); err != nil {
		t.Fatal(err)
	}
	c := startContainerd(t)
	if err := c.ctr("images", "import", filepath.Join(bin, "freeflow-image.tar")); err != nil {
		t.Fatal(err)
	}
	node := t.TempDir()
	dirs := map[string]string{"/opt/cni/bin": "cni-bin", "/etc/cni/net.d": "cni-conf", "/opt/freeflow": "opt-freeflow",
		"/etc/containerd": "containerd-conf", "/run/freeflow": "run-freeflow"}
	args := []string{"run", "--rm", "--net-host", "--env", "NODE_NAME=node1"}
	for dst, src := range dirs {
		os.MkdirAll(filepath.Join(node, src), 0o755)
		args = append(args, "--mount", "type=bind,src="+filepath.Join(node, src)+",dst="+dst+",options=rbind:rw")
	}
	os.WriteFile(filepath.Join(node, "containerd-conf", "config.toml"), []byte("version = 2\n"), 0o644)
	for _, p := range []string{"bridge", "host-local"} {
		b, _ := os.ReadFile("/usr/lib/cni/" + p)
		os.WriteFile(filepath.Join(node, "cni-bin", p), b, 0o755)
	}
	id := testenv.RandomName("ffinst", 6)
	t.Cleanup(func() { c.ctr("tasks", "kill", "-s", "KILL", id); c.ctr("containers", "rm", id) })
	args = append(args, image, id, "/freeflow/freeflowd", "install", "--pod-cidr", "10.244.5.0/24")
	if err := c.ctr(args...); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"cni-bin/freeflow-cni", "opt-freeflow/freeflow-runtime", "opt-freeflow/libfreeflow.so",
		"opt-freeflow/libffv-rdmav34.so", "opt-freeflow/freeflow-runtime.json",
		"cni-conf/" + nodeinstall.ConfListName, "run-freeflow/ff/hosts/node1/sock"} {
		if _, err := os.Stat(filepath.Join(node, f)); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(node, "containerd-conf", "config.toml")); err != nil || !strings.Contains(string(b), "runtimes.freeflow]") {
		t.Errorf("containerd's configuration has no handler freeflow: %v\n%s", err, b)
	}
	for _, f := range []string{"cni-bin/freeflow-cni", "opt-freeflow/freeflow-runtime"} {
		if interp := interpreter(t, filepath.Join(node, f)); interp != "" {
			t.Errorf("%s is not static: it needs %s", f, interp)
		}
	}
}

// interpreter returns the ELF program interpreter path names ("" for a
// static binary).
func interpreter(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			p.ReadAt(b, 0)
			return strings.TrimRight(string(b), "\x00")
		}
	}
	return ""
}
