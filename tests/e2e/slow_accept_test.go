package e2e

import (
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/testenv"
)

// TestSlowAcceptorServerOnShm: a server that calls accept() 100 ms
// after each connection is queued, later than the agent's 45 ms wait for
// an ACCEPT, and a client in another container on the same host: every
// one of 20 connections gets shm at both ends (none falls to the overlay
// with peer-timeout), every byte intact. The agent saw each connection
// still in the accept queue and waited on (internal/agent/acceptq.go).
// Across hosts, with the server 80 ms late (past the acceptor's agent's
// 40 ms, inside the connector's agent's 150 ms budget), all on host-tcp.
// A dual-stack listener ([::], as Node.js listens) holds the IPv4
// client's connection as a v4-mapped IPv6 socket: found in its queue all
// the same, all on shm.
func TestSlowAcceptorServerOnShm(t *testing.T) {
	c := newCluster(t, 2)
	c.StartDetached(t, "h1", "slow", nil, "python3", "-c", echoPy, "serve", "7001", "accept-after=100")
	c.StartDetached(t, "h1", "slow80", nil, "python3", "-c", echoPy, "serve", "7002", "accept-after=80")
	c.StartDetached(t, "h1", "slowdual", nil, "python3", "-c", echoPy, "serve", "7003", "accept-after=100", "dual")
	c.WaitListening(t, "slow", 7001)
	c.WaitListening(t, "slow80", 7002)
	c.WaitListening(t, "slowdual", 7003)
	for _, tc := range []struct{ host, srv, port, path string }{
		{"h1", "slow", "7001", "shm"},
		{"h2", "slow80", "7002", "host-tcp"},
		{"h1", "slowdual", "7003", "shm"},
	} {
		t.Run(tc.srv+"-from-"+tc.host, func(t *testing.T) {
			hosts := []string{"h1"}
			if tc.host != "h1" {
				hosts = append(hosts, tc.host)
			}
			paths := watchPaths(t, c, hosts...)
			out := c.MustFF(t, "run", "--host", tc.host, "--name", testenv.RandomName("c", 4), "--rm", "--",
				"python3", "-c", echoPy, "send", tc.srv, tc.port, "65536", "20")
			if strings.TrimSpace(out) != "OK 65536" {
				t.Fatalf("client: %q, want OK 65536 (20 connections echoed)", out)
			}
			paths.expect(t, tc.path, "")
			ends := uint64(0)
			for _, h := range hosts {
				ends += pathDeltas(paths.before[h], counters(t, c, h))[tc.path]
			}
			if ends != 40 {
				t.Errorf("%d connection ends on %s; want both ends of all 20", ends, tc.path)
			}
		})
	}
}
