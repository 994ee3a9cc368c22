package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/testenv"
)

// buildTokioEcho builds testdata/tokio-echo (an echo server and client on
// tokio's multi-threaded runtime: edge-triggered epoll, registrations
// through a copy of the epoll fd, reads and writes from worker threads)
// into a directory of the test's own and returns that directory.
func buildTokioEcho(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src, err := filepath.Abs("testdata/tokio-echo")
	must(t, err, "find testdata/tokio-echo")
	cmd := exec.Command("cargo", "build", "--release", "--locked", "--quiet",
		"--manifest-path", filepath.Join(src, "Cargo.toml"), "--target-dir", dir)
	out, err := cmd.CombinedOutput()
	must(t, err, "cargo build of testdata/tokio-echo (needs crates.io or a filled cargo cache): %s", out)
	bin := filepath.Join(dir, "release")
	_, err = os.Stat(filepath.Join(bin, "ffecho"))
	must(t, err, "the built ffecho")
	return bin
}

// TestTokioEcho: a tokio echo server and client in containers on the same
// host, 300 connections of 64 KiB one at a time and 300 with 16 in flight
// (each: write_all, shutdown, read_to_end, compare), on the overlay and on
// the fast path. Every echo must come back intact within the client's
// per-connection 30 s timeout: no reset, no hang (issue 14, item 1).
func TestTokioEcho(t *testing.T) {
	if m := testenv.Missing("cargo"); m != "" {
		t.Skip(m)
	}
	bin := buildTokioEcho(t)
	c := newCluster(t, 1)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			flags := append(volume(bin, bin), m.flags...)
			srv := testenv.RandomName("tok", 4)
			c.StartDetached(t, "h1", srv, flags, bin+"/ffecho", "serve", "7200")
			c.WaitListening(t, srv, 7200)
			for _, inFlight := range []string{"1", "16"} {
				before, start := counters(t, c, "h1"), time.Now()
				r := runClient(t, c, "h1", flags, bin+"/ffecho", "send", srv+":7200", "300", inFlight, "65536")
				if got := strings.TrimSpace(r.Stdout); got != "OK 300" {
					t.Fatalf("tokio echo client, %s in flight: %q, want OK 300 (connections intact)\nstderr: %s",
						inFlight, got, firstLines(r.Stderr, 10))
				}
				// Said, not asserted: the share on the fast path is issue 13's (late connects).
				t.Logf("%s in flight: %v (client container included), connection ends by path: %v",
					inFlight, time.Since(start).Round(time.Millisecond), pathDeltas(before, counters(t, c, "h1")))
			}
		})
	}
}

// firstLines is at most n lines of s, and how many more there were.
func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) <= n {
		return s
	}
	return strings.Join(lines[:n], "\n") + fmt.Sprintf("\n... %d more lines", len(lines)-n)
}
