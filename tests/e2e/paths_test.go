package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/state"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// counters returns host's agent's connection counters.
func counters(t testing.TB, c *testenv.Cluster, host string) agentapi.ConnCounters {
	t.Helper()
	return agentStatus(t, c, host).Connections
}

// agentStatus returns host's agent's STATUS.
func agentStatus(t testing.TB, c *testenv.Cluster, host string) agentapi.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := agentapi.DialAdmin(state.NewLayout(c.Name).AdminSocket(host))
	if err != nil {
		t.Fatalf("dial %s's agent: %v", host, err)
	}
	defer a.Close()
	st, err := a.Status(ctx)
	if err != nil {
		t.Fatalf("status of %s's agent: %v", host, err)
	}
	return st
}

// pathCheck records the agents' counters before an exchange and checks
// afterwards that the exchange took the expected path.
type pathCheck struct {
	c      *testenv.Cluster
	hosts  []string
	before map[string]agentapi.ConnCounters
}

func watchPaths(t testing.TB, c *testenv.Cluster, hosts ...string) *pathCheck {
	p := &pathCheck{c: c, hosts: hosts, before: map[string]agentapi.ConnCounters{}}
	for _, h := range hosts {
		p.before[h] = counters(t, c, h)
	}
	return p
}

// expect fails the test unless, on every watched host, the connections
// decided since watchPaths all took path: "shm", "unix" or "host-tcp"
// (some, and none on another path), "overlay" (none swapped), or "none"
// (no agent was asked: programs without the library). A reason, if given,
// must be every such connection's: why overlay, or for unix why not shm.
func (p *pathCheck) expect(t testing.TB, path, reason string) {
	t.Helper()
	for _, h := range p.hosts {
		b, a := p.before[h], counters(t, p.c, h)
		got := pathDeltas(b, a)
		ok := path == "none" || got[path] > 0
		for k, n := range got {
			ok = ok && (k == path || n == 0)
		}
		if reason != "" {
			byReason := a.FallbackReasons[reason] - b.FallbackReasons[reason]
			if path == "unix" {
				byReason = a.NotShmReasons[reason] - b.NotShmReasons[reason]
			}
			ok = ok && byReason == got[path]
		}
		if !ok {
			t.Fatalf("%s's agent: want every connection on %s %s; got %v (overlay reasons now %v, not-shm reasons now %v)",
				h, path, reason, got, a.FallbackReasons, a.NotShmReasons)
		}
	}
}

// pathDeltas counts the connection ends decided on each path between two
// readings of an agent's counters.
func pathDeltas(b, a agentapi.ConnCounters) map[string]uint64 {
	return map[string]uint64{"shm": a.Shm - b.Shm, "unix": a.Unix - b.Unix, "host-tcp": a.HostTCP - b.HostTCP,
		"overlay": a.Fallback - b.Fallback}
}
