package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/agent"
	"github.com/freeflow-net/freeflow/internal/state"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// counters returns host's agent's connection counters.
func counters(t testing.TB, c *testenv.Cluster, host string) agent.ConnCounters {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := agent.DialAdmin(state.NewLayout(c.Name).AdminSocket(host))
	if err != nil {
		t.Fatalf("dial %s's agent: %v", host, err)
	}
	defer a.Close()
	st, err := a.Status(ctx)
	if err != nil {
		t.Fatalf("status of %s's agent: %v", host, err)
	}
	return st.Connections
}

// pathCheck records the agents' counters before an exchange and checks
// afterwards that the exchange took the expected path.
type pathCheck struct {
	c      *testenv.Cluster
	hosts  []string
	before map[string]agent.ConnCounters
}

func watchPaths(t testing.TB, c *testenv.Cluster, hosts ...string) *pathCheck {
	p := &pathCheck{c: c, hosts: hosts, before: map[string]agent.ConnCounters{}}
	for _, h := range hosts {
		p.before[h] = counters(t, c, h)
	}
	return p
}

// expect fails the test unless, on every watched host, the connections
// decided since watchPaths all took path: "unix" or "host-tcp" (and none
// fell back), "overlay" with reason (and none was swapped), or "none" (no
// agent was asked: programs without the library).
func (p *pathCheck) expect(t testing.TB, path, reason string) {
	t.Helper()
	for _, h := range p.hosts {
		b, a := p.before[h], counters(t, p.c, h)
		unix, hostTCP, fallback := a.Unix-b.Unix, a.HostTCP-b.HostTCP, a.Fallback-b.Fallback
		byReason := a.FallbackReasons[reason] - b.FallbackReasons[reason]
		var ok bool
		switch path {
		case "unix":
			ok = unix > 0 && hostTCP == 0 && fallback == 0
		case "host-tcp":
			ok = hostTCP > 0 && unix == 0 && fallback == 0
		case "overlay":
			ok = unix == 0 && hostTCP == 0 && fallback > 0 && byReason == fallback
		case "none":
			ok = unix == 0 && hostTCP == 0 && fallback == 0
		}
		if !ok {
			t.Fatalf("%s's agent: want every connection on %s %s; got unix +%d, host-tcp +%d, overlay +%d (reasons now %v)",
				h, path, reason, unix, hostTCP, fallback, a.FallbackReasons)
		}
	}
}
