package etcd

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// Agents that ask for the cluster key at the same time all get the same
// one, and it is not visible as a container or host; the policy document
// round-trips and is absent by default.
func TestClusterKeyAndPolicy(t *testing.T) {
	etcd := testenv.StartEtcd(t, 1)
	cluster := testenv.RandomName("t", 4)
	dirs := []*Directory{newDir(t, cluster, etcd.Endpoints(), nil), newDir(t, cluster, etcd.Endpoints(), nil)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	key := testenv.AgreeOnKey(t, 8, func(i int) ([]byte, error) { return dirs[i%2].ClusterKey(ctx) })
	if other, err := newDir(t, testenv.RandomName("t", 4), etcd.Endpoints(), nil).ClusterKey(ctx); err != nil || bytes.Equal(other, key) {
		t.Errorf("another cluster's key: %x, %v; want a different one", other, err)
	}
	if doc, err := dirs[0].Policy(ctx); err != nil || doc != nil {
		t.Errorf("policy by default: %q, %v; want none", doc, err)
	}
	want := []byte(`{"trusted_tenant_pairs":[["a","b"]]}`)
	if err := dirs[0].PutPolicy(ctx, want); err != nil {
		t.Fatal(err)
	}
	if doc, err := dirs[1].Policy(ctx); err != nil || !bytes.Equal(doc, want) {
		t.Errorf("policy: %q, %v", doc, err)
	}
	waitConnected(t, dirs[1], 5*time.Second)
	if n := len(dirs[1].Containers()) + len(dirs[1].Hosts()); n != 0 {
		t.Errorf("key and policy show up as %d directory records", n)
	}
}

// The cluster settings round-trip, are absent by default (the default
// settings), and a misspelt setting is refused rather than ignored.
func TestClusterSettings(t *testing.T) {
	etcd := testenv.StartEtcd(t, 1)
	d := newDir(t, testenv.RandomName("t", 4), etcd.Endpoints(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if doc, err := d.Settings(ctx); err != nil || doc != nil {
		t.Fatalf("settings by default: %q, %v; want none", doc, err)
	}
	if s, err := directory.ParseSettings(nil); err != nil || s != (directory.Settings{}) {
		t.Fatalf("no document parses to %+v, %v; want the defaults", s, err)
	}
	want := directory.Settings{NoShm: true, ShmBudget: 1 << 20}
	if err := d.PutSettings(ctx, want); err != nil {
		t.Fatal(err)
	}
	doc, err := d.Settings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := directory.ParseSettings(doc); err != nil || got != want {
		t.Errorf("settings read back: %+v, %v; want %+v", got, err, want)
	}
	if _, err := directory.ParseSettings([]byte(`{"noshm": true}`)); err == nil {
		t.Error("a misspelt setting was accepted")
	}
}
