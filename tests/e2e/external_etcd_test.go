package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/state"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// TestExternalEtcdMemberKilled: a cluster whose directory is an external
// 3-member etcd (on loopback, reached from the CLI's namespace) keeps
// registering and propagating containers when one member is SIGKILLed.
func TestExternalEtcdMemberKilled(t *testing.T) {
	if skipReason != "" {
		t.Skip(skipReason)
	}
	etcd := testenv.StartEtcd(t, 3)
	c := newCluster(t, 2, "--etcd", strings.Join(etcd.Endpoints(), ","))
	l := state.NewLayout(c.Name)
	runIdle(t, c, "h1", "before", "blue")

	etcd.Kill(0)
	runIdle(t, c, "h2", "after", "blue")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range []string{"before", "after"} {
		if _, err := seen(ctx, l, "h1", name); err != nil {
			t.Fatalf("h1's agent does not list %q after an etcd member died: %v", name, err)
		}
	}
	if out := c.MustFF(t, "status"); strings.Contains(out, "CACHE ONLY") {
		t.Fatalf("status after losing one of three etcd members says agents lost the directory:\n%s", out)
	}
}
