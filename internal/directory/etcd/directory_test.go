package etcd

import (
	"context"
	"fmt"
	"github.com/freeflow-net/freeflow/internal/etcdproc"
	"github.com/freeflow-net/freeflow/internal/testenv"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Every directory test runs against a single etcd and against a
// three-member cluster; the member-loss step differs in what it expects
// (an outage that the cache rides out vs. no outage at all).
var topologies = []struct {
	name       string
	members    int
	memberLoss func(t *testing.T, etcd *testenv.EtcdCluster)
}{
	{"single", 1, checkOutage},
	{"three-member", 3, checkLeaderLoss},
}

func TestDirectory(t *testing.T) {
	for _, topo := range topologies {
		t.Run(topo.name, func(t *testing.T) {
			etcd := testenv.StartEtcd(t, topo.members)
			t.Run("put-lookup-delete", func(t *testing.T) { checkPutLookupDelete(t, etcd.Endpoints()) })
			t.Run("agent-restart-rebuilds", func(t *testing.T) { checkRestartRebuilds(t, etcd.Endpoints()) })
			t.Run("garbage-skipped", func(t *testing.T) { checkGarbage(t, etcd.Endpoints()) })
			t.Run("custom-dialer", func(t *testing.T) { checkDialer(t, etcd.Endpoints()) })
			if topo.members > 1 {
				t.Run("compaction-relists", func(t *testing.T) { checkCompactionRelist(t, etcd) })
			}
			t.Run("member-loss", func(t *testing.T) { topo.memberLoss(t, etcd) })
		})
	}
}

func newDir(t *testing.T, cluster string, endpoints []string, logs *testenv.LogBuffer) *Directory {
	t.Helper()
	if logs == nil {
		logs = &testenv.LogBuffer{}
	}
	d, err := New(context.Background(), Config{Cluster: cluster, Endpoints: endpoints, Logf: logs.Logf})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

// eventually polls cond every 5 ms and returns how long it took to hold,
// failing the test if it does not hold within limit.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

func waitConnected(t *testing.T, d *Directory, limit time.Duration) {
	t.Helper()
	eventually(t, limit, "Health().Connected", func() bool { return d.Health().Connected })
}

func testContainer(id, name, host, ip string) directory.Container {
	return directory.Container{ID: id, Name: name, Host: host, IP: ip, Tenant: "blue",
		NetNS: "/run/netns/" + id, Created: time.Now().Round(0)}
}

func put(t *testing.T, d *Directory, c directory.Container) {
	t.Helper()
	if _, err := d.PutContainer(context.Background(), c); err != nil {
		t.Fatalf("PutContainer %s: %v", c.ID, err)
	}
}

func hasIP(d *Directory, ip string) func() bool {
	return func() bool { _, ok := d.LookupIP(ip); return ok }
}

func lacksIP(d *Directory, ip string) func() bool {
	return func() bool { _, ok := d.LookupIP(ip); return !ok }
}

func checkPutLookupDelete(t *testing.T, endpoints []string) {
	cluster := testenv.RandomName("t", 4)
	d1 := newDir(t, cluster, endpoints, nil) // the agent on h1
	d2 := newDir(t, cluster, endpoints, nil) // the agent on h2
	waitConnected(t, d1, 5*time.Second)
	waitConnected(t, d2, 5*time.Second)
	events, stop := d1.Subscribe()
	defer stop()

	srv := testContainer("c-srv", "srv", "h1", "10.244.1.2")
	start := time.Now()
	put(t, d1, srv)
	eventually(t, time.Second, "h2's agent sees a container put on h1", hasIP(d2, srv.IP))
	if took := time.Since(start); took > time.Second {
		t.Fatalf("second agent saw the container %v after the write began; want < 1 s", took)
	} else {
		t.Logf("second agent saw the new container %v after the write began", took)
	}

	got, _ := d2.LookupIP(srv.IP)
	if !sameContainer(got, srv) {
		t.Fatalf("LookupIP(%s) = %+v, want %+v", srv.IP, got, srv)
	}
	if c, ok := d2.ContainerByName("srv"); !ok || c.ID != srv.ID {
		t.Fatalf("ContainerByName(srv) = %+v, %v", c, ok)
	}
	put(t, d1, testContainer("c-alpha", "alpha", "h2", "10.244.2.2"))
	eventually(t, time.Second, "second container", hasIP(d2, "10.244.2.2"))
	if names := containerNames(d2.Containers()); names != "alpha,srv" {
		t.Fatalf("Containers() names = %s, want alpha,srv (sorted by name)", names)
	}

	if err := d1.DeleteContainer(context.Background(), srv.ID); err != nil {
		t.Fatalf("DeleteContainer: %v", err)
	}
	eventually(t, time.Second, "delete reaches h2's agent", lacksIP(d2, srv.IP))
	if _, ok := d2.Container(srv.ID); ok {
		t.Fatalf("Container(%s) still present after delete", srv.ID)
	}
	if _, ok := d2.ContainerByName("srv"); ok {
		t.Fatal("ContainerByName(srv) still present after delete")
	}
	expectEvents(t, events, "put srv", "put alpha", "delete srv")
}

func expectEvents(t *testing.T, ch <-chan Event, want ...string) {
	t.Helper()
	for _, w := range want {
		select {
		case e := <-ch:
			if got := e.Kind.String() + " " + e.Container.Name; got != w {
				t.Fatalf("event %q, want %q", got, w)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("no event, want %q", w)
		}
	}
}

func containerNames(cs []directory.Container) string {
	var names []string
	for _, c := range cs {
		names = append(names, c.Name)
	}
	return strings.Join(names, ",")
}

func checkRestartRebuilds(t *testing.T, endpoints []string) {
	cluster := testenv.RandomName("t", 4)
	d1 := newDir(t, cluster, endpoints, nil)
	for i := range 5 {
		put(t, d1, testContainer(fmt.Sprintf("id%d", i), fmt.Sprintf("c%d", i), "h1", fmt.Sprintf("10.244.1.%d", 10+i)))
	}
	for _, h := range []directory.Host{{Name: "h1", FabricIP: "10.99.0.11", Subnet: "10.244.1.0/24"}, {Name: "h2", FabricIP: "10.99.0.12", Subnet: "10.244.2.0/24"}} {
		if err := d1.PutHost(context.Background(), h); err != nil {
			t.Fatalf("PutHost: %v", err)
		}
	}
	if err := d1.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	d2 := newDir(t, cluster, endpoints, nil) // the restarted agent
	took := eventually(t, 2*time.Second, "restarted agent rebuilds the full view", func() bool {
		return len(d2.Containers()) == 5 && len(d2.Hosts()) == 2
	})
	t.Logf("restarted agent rebuilt its view in %v", took)
	if names := containerNames(d2.Containers()); names != "c0,c1,c2,c3,c4" {
		t.Fatalf("Containers() = %s", names)
	}
	if hosts := d2.Hosts(); hosts[1].Subnet != "10.244.2.0/24" {
		t.Fatalf("Hosts() = %+v", hosts)
	}
	if err := d2.DeleteHost(context.Background(), "h2"); err != nil {
		t.Fatalf("DeleteHost: %v", err)
	}
	eventually(t, time.Second, "host delete", func() bool { return len(d2.Hosts()) == 1 })
}

// rawClient writes to etcd directly, as another tool (or vandal) would.
func rawClient(t *testing.T, endpoints []string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func checkGarbage(t *testing.T, endpoints []string) {
	cluster := testenv.RandomName("t", 4)
	prefix := Prefix(cluster)
	raw := rawClient(t, endpoints)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for key, value := range map[string]string{
		"containers/bad":      "{not json",
		"containers/mismatch": `{"id":"other","name":"x","ip":"10.244.9.9"}`,
		"hosts/bad":           "[1,2",
		"containers/a/deeper": "ignored: not in the layout",
	} {
		if _, err := raw.Put(ctx, prefix+key, value); err != nil {
			t.Fatalf("raw put: %v", err)
		}
	}
	logs := &testenv.LogBuffer{}
	d := newDir(t, cluster, endpoints, logs)
	put(t, d, testContainer("good", "good", "h1", "10.244.1.5"))
	eventually(t, 2*time.Second, "valid record next to garbage", hasIP(d, "10.244.1.5"))
	if names := containerNames(d.Containers()); names != "good" {
		t.Fatalf("Containers() = %s, want only good", names)
	}
	if _, ok := d.LookupIP("10.244.9.9"); ok {
		t.Fatal("record whose id disagrees with its key was accepted")
	}

	// Garbage over a valid record removes it, as a fresh list would.
	if _, err := raw.Put(ctx, prefix+"containers/good", "garbage"); err != nil {
		t.Fatalf("raw put: %v", err)
	}
	eventually(t, time.Second, "garbage replaces a record", lacksIP(d, "10.244.1.5"))
	// The record goes before its garbage is logged: wait for the line, not assume it.
	eventually(t, time.Second, "the garbage over a record logged", func() bool {
		return logs.Count(prefix+"containers/good ") > 0
	})
	for _, key := range []string{"containers/bad", "containers/mismatch", "hosts/bad", "containers/good"} {
		if n := logs.Count(prefix + key + " "); n != 1 {
			t.Errorf("key %s logged %d times, want once", key, n)
		}
	}
	if n := logs.Count("deeper"); n != 0 {
		t.Errorf("key outside the layout logged %d times, want never", n)
	}
	if err := d.DeleteContainer(ctx, "never-existed"); err != nil {
		t.Fatalf("DeleteContainer of a missing id: %v", err)
	}
	if err := d.DeleteHost(ctx, "never-existed"); err != nil {
		t.Fatalf("DeleteHost of a missing host: %v", err)
	}
}

// checkDialer: with Config.Dialer set (the CLI dials from the fabric
// namespace) every etcd connection goes through it.
func checkDialer(t *testing.T, endpoints []string) {
	var mu sync.Mutex
	var addrs []string
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		mu.Lock()
		addrs = append(addrs, addr)
		mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := etcdproc.WaitHealthy(ctx, endpoints[0], dial); err != nil {
		t.Fatalf("WaitHealthy through the dialer: %v", err)
	}
	d, err := New(ctx, Config{Cluster: testenv.RandomName("t", 4), Endpoints: endpoints, Dialer: dial, Logf: t.Logf})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	put(t, d, testContainer("c-d", "d", "h1", "10.244.1.9"))
	eventually(t, time.Second, "write and watch through the dialer", hasIP(d, "10.244.1.9"))
	mu.Lock()
	defer mu.Unlock()
	want := strings.TrimPrefix(endpoints[0], "http://")
	if !slices.Contains(addrs, want) {
		t.Fatalf("dialer saw %q, want it to include %s", addrs, want)
	}
}
