package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/state"
)

// seen polls host's agent until it lists container name, and returns when.
func seen(ctx context.Context, l state.Layout, host, name string) (time.Time, error) {
	for {
		if ok, err := lists(ctx, l, host, name); err == nil && ok {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// lists reports whether host's agent lists container name.
func lists(ctx context.Context, l state.Layout, host, name string) (bool, error) {
	_, found, err := listed(ctx, l, host, name)
	return found, err
}

// listed returns the record of container name as host's agent lists it.
func listed(ctx context.Context, l state.Layout, host, name string) (directory.Container, bool, error) {
	a, err := agentapi.DialAdmin(l.AdminSocket(host))
	if err != nil {
		return directory.Container{}, false, err
	}
	defer a.Close()
	cs, err := a.List(ctx)
	if err != nil {
		return directory.Container{}, false, err
	}
	for _, c := range cs {
		if c.Name == name {
			return c, true, nil
		}
	}
	return directory.Container{}, false, nil
}

// TestAgentSeesRemoteContainerWithin1s: a container started on h2 is known
// to h1's agent within a second of h2's agent registering it.
func TestAgentSeesRemoteContainerWithin1s(t *testing.T) {
	c := newCluster(t, 2)
	l := state.NewLayout(c.Name)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	type when struct {
		t   time.Time
		err error
	}
	onH1, onH2 := make(chan when, 1), make(chan when, 1)
	go func() { ts, err := seen(ctx, l, "h1", "far"); onH1 <- when{ts, err} }()
	go func() { ts, err := seen(ctx, l, "h2", "far"); onH2 <- when{ts, err} }()
	runIdle(t, c, "h2", "far", "blue")
	w1, w2 := <-onH1, <-onH2
	must(t, w1.err, "h1's agent never listed the container")
	must(t, w2.err, "h2's agent never listed the container")
	lag := w1.t.Sub(w2.t)
	t.Logf("h1 saw the container %v after h2 registered it", lag)
	if lag > time.Second {
		t.Fatalf("h1's agent saw a container started on h2 after %v, want within 1s", lag)
	}
}

// TestAgentRestartRebuildsView: an agent killed mid-run and restarted knows
// every container again, including those created while it was down, and
// still recognises its own local containers.
func TestAgentRestartRebuildsView(t *testing.T) {
	c := newCluster(t, 2)
	l := state.NewLayout(c.Name)
	runIdle(t, c, "h1", "local", "blue")
	c.MustFF(t, "agent", "stop", "--kill", "--host", "h1")
	runIdle(t, c, "h2", "whiledown", "blue")
	c.MustFF(t, "agent", "start", "--host", "h1")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, name := range []string{"local", "whiledown"} {
		if _, err := seen(ctx, l, "h1", name); err != nil {
			t.Fatalf("restarted agent on h1 does not list %q: %v", name, err)
		}
	}
	// The local container can still talk to its agent as itself.
	out := c.MustFF(t, "exec", "local", "--", "python3", "-c", agentClientPy, "hello")
	if want := "name=local"; !strings.Contains(out, want) {
		t.Fatalf("HELLO from container 'local' after agent restart: got %q, want %q", out, want)
	}
}
