package etcd

import (
	"context"
	"github.com/freeflow-net/freeflow/internal/testenv"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// checkOutage: the only etcd dies. The cache keeps serving, Health says
// why, writes fail within the timeout; after a restart on the same data the
// cache catches up with what changed meanwhile.
func checkOutage(t *testing.T, etcd *testenv.EtcdCluster) {
	cluster := testenv.RandomName("t", 4)
	eps := etcd.Endpoints()
	d := newDir(t, cluster, eps, nil)
	waitConnected(t, d, 5*time.Second)
	a := testContainer("c-a", "a", "h1", "10.244.1.2")
	put(t, d, a)
	eventually(t, time.Second, "container cached", hasIP(d, a.IP))

	etcd.Kill(0)
	took := eventually(t, 3*time.Second, "Health shows the outage", func() bool {
		h := d.Health()
		return !h.Connected && h.LastError != ""
	})
	t.Logf("outage noticed after %v: %+v", took, d.Health())
	if c, ok := d.LookupIP(a.IP); !ok || c.Name != "a" {
		t.Fatalf("LookupIP during the outage = %+v, %v; want the cached record", c, ok)
	}
	if names := containerNames(d.Containers()); names != "a" {
		t.Fatalf("Containers() during the outage = %q", names)
	}
	b := testContainer("c-b", "b", "h2", "10.244.2.2")
	start := time.Now()
	_, err := d.PutContainer(context.Background(), b)
	if took := time.Since(start); err == nil || took > 4*time.Second {
		t.Fatalf("PutContainer during the outage: err=%v after %v; want an error within 4 s", err, took)
	}
	if !strings.Contains(err.Error(), "check that etcd is running") {
		t.Fatalf("write error does not say what to do: %v", err)
	}

	etcd.Restart(0)
	third := newDir(t, cluster, eps, nil)
	put(t, third, b)
	if err := third.DeleteContainer(context.Background(), a.ID); err != nil {
		t.Fatalf("DeleteContainer after restart: %v", err)
	}
	took = eventually(t, 5*time.Second, "cache catches up after etcd restart", func() bool {
		return hasIP(d, b.IP)() && lacksIP(d, a.IP)()
	})
	t.Logf("caught up %v after the change", took)
	waitConnected(t, d, 5*time.Second)
	if h := d.Health(); h.LastError != "" || h.LastSync.IsZero() {
		t.Fatalf("Health after recovery = %+v", h)
	}
}

// checkLeaderLoss: one of three members (the leader, the hardest one) dies;
// writes and the watch keep working and every directory check still passes.
func checkLeaderLoss(t *testing.T, etcd *testenv.EtcdCluster) {
	cluster := testenv.RandomName("t", 4)
	eps := etcd.Endpoints()
	d1 := newDir(t, cluster, eps, nil)
	d2 := newDir(t, cluster, eps, nil)
	waitConnected(t, d1, 5*time.Second)
	waitConnected(t, d2, 5*time.Second)
	a := testContainer("c-a", "a", "h1", "10.244.1.2")
	put(t, d1, a)
	eventually(t, time.Second, "second agent sees a", hasIP(d2, a.IP))

	leader := leader(t, etcd)
	etcd.Kill(leader)
	t.Logf("killed etcd member %d, the leader", leader)

	b := testContainer("c-b", "b", "h2", "10.244.2.2")
	start := time.Now()
	put(t, d2, b)
	t.Logf("first write after the kill took %v", time.Since(start))
	took := eventually(t, time.Second, "first agent sees b after the leader died", hasIP(d1, b.IP))
	t.Logf("first agent saw it after %v", took)
	waitConnected(t, d1, 5*time.Second)
	waitConnected(t, d2, 5*time.Second)

	t.Run("put-lookup-delete", func(t *testing.T) { checkPutLookupDelete(t, eps) })
	t.Run("agent-restart-rebuilds", func(t *testing.T) { checkRestartRebuilds(t, eps) })
}

// leader returns the index of the member that leads the etcd cluster.
func leader(t *testing.T, c *testenv.EtcdCluster) int {
	t.Helper()
	raw := rawClient(t, c.Endpoints())
	for i, m := range c.Members {
		if !m.Running() {
			continue // killed
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := raw.Status(ctx, m.Config.ClientURL)
		cancel()
		if err != nil {
			t.Fatalf("status of %s: %v", m.Config.ClientURL, err)
		}
		if st.Leader == st.Header.MemberId {
			return i
		}
	}
	t.Fatal("no etcd member says it is the leader")
	return -1
}

// checkCompactionRelist: an agent whose only member was down while others
// changed and compacted the history cannot resume its watch; it must
// re-list, and subscribers learn the difference.
func checkCompactionRelist(t *testing.T, etcd *testenv.EtcdCluster) {
	cluster := testenv.RandomName("t", 4)
	eps := etcd.Endpoints()
	logs := &testenv.LogBuffer{}
	agent := newDir(t, cluster, eps[:1], logs)
	writer := newDir(t, cluster, eps[1:], nil)
	x := testContainer("c-x", "x", "h1", "10.244.1.7")
	put(t, writer, x)
	eventually(t, 2*time.Second, "agent sees x", hasIP(agent, x.IP))
	events, stop := agent.Subscribe()
	defer stop()

	etcd.Kill(0)
	y := testContainer("c-y", "y", "h2", "10.244.2.7")
	put(t, writer, y)
	if err := writer.DeleteContainer(context.Background(), x.ID); err != nil {
		t.Fatalf("DeleteContainer: %v", err)
	}
	compactAll(t, eps[1:])
	etcd.Restart(0)

	eventually(t, 5*time.Second, "agent re-lists after compaction", func() bool {
		return hasIP(agent, y.IP)() && lacksIP(agent, x.IP)()
	})
	if logs.Count("compacted") == 0 {
		t.Fatalf("agent caught up without the compaction path; logs:\n%s", logs)
	}
	expectEvents(t, events, "delete x", "put y")
}

func compactAll(t *testing.T, eps []string) {
	t.Helper()
	raw := rawClient(t, eps)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := raw.Get(ctx, "/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatalf("get revision: %v", err)
	}
	if _, err := raw.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compact: %v", err)
	}
}

// TestNewWithoutEtcd: an agent starts while etcd is unreachable; New must
// not wait, reads answer from the (empty) cache, writes fail in time.
func TestNewWithoutEtcd(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := "http://" + l.Addr().String()
	l.Close() // nothing listens there now

	start := time.Now()
	d, err := New(context.Background(), Config{Cluster: testenv.RandomName("t", 4), Endpoints: []string{ep},
		RequestTimeout: 500 * time.Millisecond, Logf: t.Logf})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer d.Close()
	if took := time.Since(start); took > 200*time.Millisecond {
		t.Fatalf("New took %v with etcd unreachable; it must not wait", took)
	}
	if _, ok := d.LookupIP("10.244.1.2"); ok || len(d.Containers()) != 0 {
		t.Fatal("empty cache answered a lookup")
	}
	start = time.Now()
	_, err = d.PutContainer(context.Background(), testContainer("c", "c", "h1", "10.244.1.2"))
	if took := time.Since(start); err == nil || took > 1500*time.Millisecond {
		t.Fatalf("PutContainer: err=%v after %v; want an error within 1.5 s", err, took)
	}
	if h := d.Health(); h.Connected || h.LastError == "" {
		t.Fatalf("Health = %+v; want not connected, with a reason", h)
	}
	if _, err := New(context.Background(), Config{Cluster: "a/b", Endpoints: []string{ep}}); err == nil {
		t.Fatal("New accepted a cluster name with '/'")
	}
}
