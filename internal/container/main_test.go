package container_test

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/state"
)

// These tests drive the real CLI binary against a real 2-host cluster
// (namespaces, etcd, freeflowd, crun, CNI). TestMain builds the binaries and
// brings the cluster up once; every test removes its own containers.

var (
	binDir     string // freeflow, freeflowd, freeflow-cni
	cluster    string // unique per run so parallel runs never collide
	skipReason string
	setupErr   string // why the cluster could not be set up; its tests fail with it
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if skipReason = prerequisites(); skipReason != "" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "ffbin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	build := exec.Command("go", "build", "-o", binDir+"/", "./cmd/...")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		setupErr = fmt.Sprintf("build binaries: %v\n%s", err, out)
		return m.Run()
	}
	cluster = "tc" + randomSuffix(4)
	if out, err := exec.Command(binDir+"/freeflow", "--cluster", cluster, "cluster", "up", "--hosts", "2").CombinedOutput(); err != nil {
		setupErr = fmt.Sprintf("cluster up: %v\n%s", err, out)
		exec.Command(binDir+"/freeflow", "--cluster", cluster, "cluster", "down").Run()
		return m.Run()
	}
	defer func() {
		if out, err := exec.Command(binDir+"/freeflow", "--cluster", cluster, "cluster", "down").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "cluster down: %v\n%s", err, out)
		}
	}()
	return m.Run()
}

func prerequisites() string {
	if os.Geteuid() != 0 {
		return "needs root: creates namespaces, mounts and containers"
	}
	for _, p := range []string{"crun", "ip", "unshare", "iperf3", "python3", "cnitool", "etcd", "etcdctl", "/usr/lib/cni/bridge"} {
		if _, err := exec.LookPath(p); err != nil {
			return "missing " + p
		}
	}
	return ""
}

func needCluster(t *testing.T) state.Layout {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	if setupErr != "" {
		t.Fatal(setupErr)
	}
	return state.NewLayout(cluster)
}

func randomSuffix(n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = letters[int(b[i])%len(letters)]
	}
	return string(b)
}

// result is one CLI run.
type result struct {
	stdout, stderr string
	code           int
}

// ff runs the freeflow CLI on the test cluster.
func ff(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(filepath.Join(binDir, "freeflow"), append([]string{"--cluster", cluster}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("freeflow %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// mustFF runs the CLI and fails the test unless it exits 0.
func mustFF(t *testing.T, args ...string) string {
	t.Helper()
	r := ff(t, args...)
	if r.code != 0 {
		t.Fatalf("freeflow %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// startDetached runs a detached container and removes it when the test ends.
func startDetached(t *testing.T, host, name string, argv ...string) {
	t.Helper()
	mustFF(t, append([]string{"run", "--host", host, "--name", name, "-d", "--"}, argv...)...)
	t.Cleanup(func() { removeContainer(t, name) })
}

func removeContainer(t *testing.T, name string) {
	if r := ff(t, "rm", "-f", name); r.code != 0 && !strings.Contains(r.stderr, "no container") {
		t.Errorf("rm -f %s: exit %d: %s", name, r.code, r.stderr)
	}
}
