package testenv

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// StartDetached runs a detached container (extra run flags first, then
// "--" and argv) and removes it when the test ends.
func (c *Cluster) StartDetached(t testing.TB, host, name string, flags []string, argv ...string) {
	t.Helper()
	args := append([]string{"run", "--host", host, "--name", name, "-d"}, flags...)
	c.MustFF(t, append(append(args, "--"), argv...)...)
	t.Cleanup(func() {
		if r := c.FF(t, "rm", "-f", name); r.Code != 0 && !strings.Contains(r.Stderr, "no container") {
			t.Errorf("rm -f %s: exit %d: %s", name, r.Code, r.Stderr)
		}
	})
}

// WaitListening waits until container name listens on every TCP port.
func (c *Cluster) WaitListening(t testing.TB, name string, ports ...int) {
	t.Helper()
	for _, p := range ports {
		// /proc/net/tcp{,6} lines: local address:port, remote (zero) address:port, state (0A = LISTEN).
		pattern := fmt.Sprintf(":%04X [0-9A-F]+:0000 0A", p)
		WaitFor(t, fmt.Sprintf("%s to listen on %d", name, p), func() bool {
			return c.FF(t, "exec", name, "--", "grep", "-qsE", pattern, "/proc/net/tcp", "/proc/net/tcp6").Code == 0
		})
	}
}

// WaitFor polls ok for up to 10 s and fails the test if it never holds.
func WaitFor(t testing.TB, what string, ok func() bool) {
	t.Helper()
	WaitWithin(t, 10*time.Second, what, ok)
}

// WaitWithin is WaitFor for up to d.
func WaitWithin(t testing.TB, d time.Duration, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
