package e2e

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/freeflow-net/freeflow/internal/testenv"
)

// The apps_*_test.go files run real, unmodified programs (Debian packages)
// as server and client containers, on the baseline overlay and on
// FreeFlow's fast paths, same host and cross host, and check both what the
// program delivered and the path its connections took.

// onEveryPath starts a server per mode with start (which returns its
// container name) and then runs client once per client host, h1 (the
// server's host) and h2, each as its own subtest, checking that every
// connection the client made took the mode's path.
func onEveryPath(t *testing.T, c *testenv.Cluster,
	start func(t *testing.T, m mode) string,
	client func(t *testing.T, host, server string, flags []string)) {
	t.Helper()
	for _, m := range modes {
		server := start(t, m)
		for _, host := range []string{"h1", "h2"} {
			want, involved := m.sameHost, []string{"h1"}
			if host != "h1" {
				want, involved = m.cross, []string{"h1", "h2"}
			}
			t.Run(m.name+"-"+host, func(t *testing.T) {
				paths := watchPaths(t, c, involved...)
				client(t, host, server, m.flags)
				paths.expect(t, want, "")
			})
		}
	}
}

// runClient runs argv in a new container on host (extra run flags first)
// until it exits, fails the test unless it exits 0, and returns its output.
func runClient(t *testing.T, c *testenv.Cluster, host string, flags []string, argv ...string) testenv.Result {
	t.Helper()
	args := append([]string{"run", "--host", host, "--name", testenv.RandomName("a", 5), "--rm"}, flags...)
	args = append(append(args, "--"), argv...)
	r := c.FF(t, args...)
	if r.Code != 0 {
		t.Fatalf("%s on %s: exit %d\nstdout: %s\nstderr: %s", argv[0], host, r.Code, r.Stdout, r.Stderr)
	}
	return r
}

// hostFile writes content to a new file named name in a directory of the
// test's own, for containers to mount, and returns the file's path.
func hostFile(t *testing.T, name string, content []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	must(t, os.WriteFile(path, content, 0o644), "write %s", path)
	return path
}

// randomBytes returns n random bytes.
func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// volume is the -v flag that mounts src read-only at dst.
func volume(src, dst string) []string {
	return []string{"-v", src + ":" + dst + ":ro"}
}
