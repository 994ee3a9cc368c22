package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/ffspec"
	"github.com/freeflow-net/freeflow/internal/ociimage"
	"github.com/freeflow-net/freeflow/internal/runtimewrap"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// TestContainerdShimRunsWrapper: containerd's runc shim, given the wrapper
// as its runc (what the installed handler's BinaryName does for the handler
// "freeflow"), drives a container's whole life through it (create, start,
// state, kill, delete with go-runc's command lines), and the container's
// program, from an ordinary glibc image, runs with the library mapped and
// the agent's directory read-only.
func TestContainerdShimRunsWrapper(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (containerd)")
	}
	if missing := testenv.Missing("containerd", "ctr", "runc", "ldd"); missing != "" {
		t.Skip(missing)
	}
	bin, err := testenv.BuildBinaries()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bin) })
	sock := filepath.Join(t.TempDir(), "sock")
	os.Mkdir(sock, 0o755)
	os.WriteFile(filepath.Join(sock, "agent.sock"), nil, 0o644)
	runc, _ := exec.LookPath("runc")
	cfg, _ := json.Marshal(runtimewrap.Config{Runtime: runc, Library: filepath.Join(bin, ffspec.LibraryName), AgentSockDir: sock})
	os.WriteFile(filepath.Join(bin, runtimewrap.ConfigName), cfg, 0o644)

	c := startContainerd(t)
	const image = "freeflow.io/test-glibc:1"
	tar := filepath.Join(t.TempDir(), "image.tar")
	if err := ociimage.WriteFile(tar, glibcRootfs(t, "dash", "grep", "ls", "touch"), ociimage.Config{Name: image}); err != nil {
		t.Fatal(err)
	}
	if err := c.ctr("images", "import", tar); err != nil {
		t.Fatal(err)
	}
	id := testenv.RandomName("ffshim", 6)
	t.Cleanup(func() { c.ctr("tasks", "kill", "-s", "KILL", id); c.ctr("containers", "rm", id) })
	script := `echo "preload=$LD_PRELOAD"; grep -q ` + ffspec.LibraryName + ` /proc/self/maps && echo mapped
ls /run/freeflow; touch /run/freeflow/x 2>/dev/null || echo read-only`
	out, err := exec.Command("ctr", "--address", c.sock, "-n", "k8s.io", "run", "--rm",
		"--runc-binary", filepath.Join(bin, "freeflow-runtime"), image, id, "/bin/dash", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("ctr run: %v\n%s", err, out)
	}
	for _, want := range []string{"preload=" + ffspec.ContainerLibrary, "mapped", "agent.sock", "read-only"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("container output lacks %q:\n%s", want, out)
		}
	}
}

// glibcRootfs makes the file system of a small glibc image: the machine's
// programs (in /bin) and the shared libraries they load, where the machine
// has them.
func glibcRootfs(t *testing.T, programs ...string) string {
	t.Helper()
	root := t.TempDir()
	lib := regexp.MustCompile(`(/\S+\.so[.\d]*)`)
	copyFile := func(src, dst string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Dir(dst), 0o755)
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range programs {
		path, err := exec.LookPath(p)
		if err != nil {
			t.Fatal(err)
		}
		copyFile(path, filepath.Join(root, "bin", p))
		out, err := exec.Command("ldd", path).Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", path, err)
		}
		for _, m := range lib.FindAllString(string(out), -1) {
			copyFile(m, filepath.Join(root, m))
		}
	}
	return root
}
