// Package testenv is the shared harness of tests that drive real clusters:
// it builds the binaries from this tree, names clusters uniquely so parallel
// runs never collide, checks prerequisites and runs the CLI.
package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/state"
)

// RandomName returns prefix followed by n random lower-case letters or digits.
func RandomName(prefix string, n int) string { return state.RandomName(prefix, n) }

// Missing returns why the tests cannot run here ("" if they can): not root,
// or a program missing (named with the Debian package that provides it).
func Missing(programs ...string) string {
	if os.Geteuid() != 0 {
		return "needs root: creates network namespaces, mounts and containers"
	}
	for _, p := range programs {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Sprintf("needs %s (run scripts/install-deps.sh)", p)
		}
	}
	return ""
}

// ModuleRoot finds the directory holding go.mod above the working directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// BuildBinaries compiles freeflow, freeflowd and freeflow-cni, and builds
// the network library and the verbs provider (make -C lib) and copies
// libfreeflow.so and libffv-rdmav34.so next to them,
// into a new temporary directory (readable by everyone, so a test may run
// the CLI as an unprivileged user) and returns it; the caller removes it.
func BuildBinaries() (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "ffbin")
	if err != nil {
		return "", err
	}
	os.Chmod(dir, 0o755)
	for _, argv := range [][]string{
		{"go", "build", "-o", dir + "/", "./cmd/..."},
		{"make", "-s", "-C", "lib"},
		{"cp", "lib/build/libfreeflow.so", "lib/build/libffv-rdmav34.so", dir + "/"},
	} {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("build binaries (%s): %w\n%s", strings.Join(argv, " "), err, out)
		}
	}
	return dir, nil
}

// Make runs `make TARGET BIN=bin` at the module root: what the Makefile
// builds into a bin directory of the test's (image, kubelab).
func Make(target, bin string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	if out, err := exec.Command("make", "-s", "-C", root, target, "BIN="+bin).CombinedOutput(); err != nil {
		return fmt.Errorf("make %s: %w\n%s", target, err, out)
	}
	return nil
}

// Result is one run of the CLI.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// Cluster is a cluster under test, driven through the real CLI.
type Cluster struct {
	Name   string
	BinDir string
}

// Run runs `freeflow --cluster NAME args...`; err is set only when the
// program could not run at all.
func (c *Cluster) Run(args ...string) (Result, error) {
	var out, errb bytes.Buffer
	cmd := exec.Command(filepath.Join(c.BinDir, "freeflow"), append([]string{"--cluster", c.Name}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := Result{Stdout: out.String(), Stderr: errb.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.Code, err = ee.ExitCode(), nil
	}
	return r, err
}

// FF runs the CLI and fails the test if it could not run.
func (c *Cluster) FF(t testing.TB, args ...string) Result {
	t.Helper()
	r, err := c.Run(args...)
	if err != nil {
		t.Fatalf("freeflow %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// MustFF runs the CLI and fails the test unless it exits 0; it returns stdout.
func (c *Cluster) MustFF(t testing.TB, args ...string) string {
	t.Helper()
	r := c.FF(t, args...)
	if r.Code != 0 {
		t.Fatalf("freeflow %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.Code, r.Stdout, r.Stderr)
	}
	return r.Stdout
}

// Up brings up a new cluster with a unique name starting with prefix; on
// failure it has already torn down whatever was made.
func Up(binDir, prefix string, hosts int, extra ...string) (*Cluster, error) {
	c := &Cluster{Name: RandomName(prefix, 4), BinDir: binDir}
	args := append([]string{"cluster", "up", "--hosts", fmt.Sprint(hosts)}, extra...)
	r, err := c.Run(args...)
	if err == nil && r.Code != 0 {
		err = fmt.Errorf("exit %d: %s%s", r.Code, r.Stdout, r.Stderr)
	}
	if err != nil {
		c.Down()
		return nil, fmt.Errorf("cluster up %s: %w", c.Name, err)
	}
	return c, nil
}

// Down removes the cluster and everything it made.
func (c *Cluster) Down() error {
	r, err := c.Run("cluster", "down")
	if err == nil && r.Code != 0 {
		err = fmt.Errorf("exit %d: %s%s", r.Code, r.Stdout, r.Stderr)
	}
	return err
}
