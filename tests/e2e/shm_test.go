package e2e

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/freeflow-net/freeflow/internal/agent"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// connsOf returns the entries of `freeflow conns -o json` that have
// container name at either end.
func connsOf(t *testing.T, c *testenv.Cluster, name string) []agent.ConnInfo {
	t.Helper()
	var all, mine []agent.ConnInfo
	out := c.MustFF(t, "conns", "-o", "json")
	must(t, json.Unmarshal([]byte(out), &all), "parse `freeflow conns -o json`: %s", out)
	for _, e := range all {
		if e.LocalContainer == name || e.RemoteContainer == name {
			mine = append(mine, e)
		}
	}
	return mine
}

// TestSameHostShmListedInConns: with a connection held open between two
// containers of one host, `freeflow conns` lists both of its ends on shm,
// and the agent's status counts the shared memory charged for it until the
// client is killed and the server closes its end; a client started with
// --no-shm gets a socket pair instead, listed as unix with the reason
// shm-off. The bytes echo intact either way.
func TestSameHostShmListedInConns(t *testing.T) {
	c := newCluster(t, 1)
	c.StartDetached(t, "h1", "srv", nil, "python3", "-c", echoPy, "serve", "7001")
	c.WaitListening(t, "srv", 7001)
	for _, tc := range []struct {
		name         string
		flags        []string
		path, reason string
	}{
		{"shm", nil, "shm", ""},
		{"no-shm", []string{"--no-shm"}, "unix", "shm-off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := testenv.RandomName("k", 4)
			paths := watchPaths(t, c, "h1")
			c.StartDetached(t, "h1", cli, tc.flags, "python3", "-c", stepClientPy, "srv", "7001")
			waitLog(t, c, cli, "step1 OK")
			paths.expect(t, tc.path, tc.reason)
			ends := connsOf(t, c, cli)
			if len(ends) != 2 {
				t.Fatalf("conns lists %d ends of %s's connection, want 2: %+v", len(ends), cli, ends)
			}
			for _, e := range ends {
				if e.Path != tc.path || e.Reason != tc.reason {
					t.Errorf("conns entry %+v; want path %s, reason %q", e, tc.path, tc.reason)
				}
			}
			if got := counters(t, c, "h1").ShmBytes; (tc.path == "shm") != (got > 0) {
				t.Errorf("status shm_bytes = %d with the %s connection open", got, tc.path)
			}
			// The client dies without closing; the server then closes its end.
			c.MustFF(t, "rm", "-f", cli)
			testenv.WaitFor(t, "the agent to release the shared memory of closed connections", func() bool {
				return counters(t, c, "h1").ShmBytes == 0
			})
		})
	}
}

// TestClusterNoShm: in a cluster brought up with --no-shm, same-host
// connections get a socket pair (unix, shm-off-cluster), intact.
func TestClusterNoShm(t *testing.T) {
	c := newCluster(t, 1, "--no-shm")
	c.StartDetached(t, "h1", "srv", nil, "python3", "-c", echoPy, "serve", "7001")
	c.WaitListening(t, "srv", 7001)
	paths := watchPaths(t, c, "h1")
	echoOK(t, c.MustFF(t, "run", "--host", "h1", "--name", testenv.RandomName("b", 4), "--rm", "--",
		"python3", "-c", echoPy, "send", "srv", "7001", fmt.Sprint(echoBytes)), echoBytes)
	paths.expect(t, "unix", "shm-off-cluster")
}
