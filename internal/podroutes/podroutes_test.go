package podroutes

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/testenv"
	"github.com/vishvananda/netlink"
)

// testNode makes a network namespace with a link on the nodes' segment
// (10.99.0.11/24) and returns its name and a handle in it.
func testNode(t *testing.T) (string, *netlink.Handle) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	if why := testenv.Missing("ip"); why != "" {
		t.Skip(why)
	}
	ns := testenv.RandomName("ffpr", 6)
	if err := netns.Create(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Delete(ns) })
	ip(t, ns, "link", "add", "fabric", "type", "veth", "peer", "name", "peer")
	ip(t, ns, "addr", "add", "10.99.0.11/24", "dev", "fabric")
	ip(t, ns, "link", "set", "peer", "up")
	ip(t, ns, "link", "set", "fabric", "up")
	var h *netlink.Handle
	err := netns.Do(netns.Path(ns), func() error {
		var err error
		h, err = Open()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return ns, h
}

func ip(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
	return string(out)
}

// routes lists ns's IPv4 main-table routes as `ip route` prints them.
func routes(t *testing.T, ns string) string { return ip(t, ns, "-4", "route", "show") }

var nodes = []directory.Host{
	{Name: "n1", FabricIP: "10.99.0.11", Subnet: "10.244.1.0/24"},
	{Name: "n2", FabricIP: "10.99.0.12", Subnet: "10.244.2.0/24"},
	{Name: "n3", FabricIP: "10.99.0.13", Subnet: "10.244.3.0/24"},
	{Name: "n4", FabricIP: "10.99.0.14"}, // no pod CIDR yet
}

// TestPodRoutesFollowNodes: every other node's pod CIDR is routed through
// its address (not the node's own, not a node without a CIDR); a node gone
// takes its route with it; a route of someone else's to another
// destination stays, and one to a node's pod CIDR is taken over; syncing
// again changes nothing.
func TestPodRoutesFollowNodes(t *testing.T) {
	ns, h := testNode(t)
	ip(t, ns, "route", "add", "10.250.0.0/16", "via", "10.99.0.1", "proto", "static")
	ip(t, ns, "route", "add", "10.244.3.0/24", "via", "10.99.0.1", "proto", "static")
	if err := Sync(h, Want(nodes, "n1")); err != nil {
		t.Fatal(err)
	}
	got := routes(t, ns)
	for _, want := range []string{"10.244.2.0/24 via 10.99.0.12 dev fabric proto 70", "10.244.3.0/24 via 10.99.0.13 dev fabric proto 70",
		"10.250.0.0/16 via 10.99.0.1 dev fabric proto static"} {
		if !strings.Contains(got, want) {
			t.Errorf("routes lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "10.244.1.0/24") || strings.Count(got, "10.244.3.0/24") != 1 {
		t.Errorf("the node's own CIDR routed, or the other route to n3's kept:\n%s", got)
	}
	if err := Sync(h, Want(nodes[:2], "n1")); err != nil {
		t.Fatal(err)
	}
	got = routes(t, ns)
	if strings.Contains(got, "10.244.3.0/24") || !strings.Contains(got, "10.244.2.0/24 via 10.99.0.12") || !strings.Contains(got, "10.250.0.0/16") {
		t.Errorf("after n3 left:\n%s", got)
	}
	before := got
	if err := Sync(h, Want(nodes[:2], "n1")); err != nil || routes(t, ns) != before {
		t.Errorf("a second sync changed the routes (%v):\n%s\nwere\n%s", err, routes(t, ns), before)
	}
}

// TestPodRoutesHandleKeepsItsNamespace: the handle acts on the namespace
// it was opened in, whatever namespace the thread using it is in (an
// agent's threads enter pods' namespaces).
func TestPodRoutesHandleKeepsItsNamespace(t *testing.T) {
	ns, h := testNode(t)
	other, _ := testNode(t)
	runtime.LockOSThread() // netns.Do restores the thread; keep the test's own on it
	defer runtime.UnlockOSThread()
	err := netns.Do(netns.Path(other), func() error { return Sync(h, Want(nodes, "n1")) })
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(routes(t, ns), "10.244.2.0/24") || strings.Contains(routes(t, other), "10.244.2.0/24") {
		t.Errorf("routes went to the thread's namespace:\nopened in: %s\nthread in: %s", routes(t, ns), routes(t, other))
	}
}

// TestPodRoutesNotOnLink: a node address no link of this node reaches
// (nodes not on one layer-2 segment) is an error naming the route and what
// host-gw needs; the other routes are still made.
func TestPodRoutesNotOnLink(t *testing.T) {
	ns, h := testNode(t)
	far := append([]directory.Host{{Name: "far", FabricIP: "192.0.2.7", Subnet: "10.244.9.0/24"}}, nodes...)
	err := Sync(h, Want(far, "n1"))
	if err == nil || !strings.Contains(err.Error(), "10.244.9.0/24 via 192.0.2.7") || !strings.Contains(err.Error(), "layer-2") {
		t.Fatalf("Sync: %v, want an error naming the route and layer 2", err)
	}
	if !strings.Contains(routes(t, ns), "10.244.2.0/24 via 10.99.0.12") {
		t.Errorf("the reachable nodes' routes were not made:\n%s", routes(t, ns))
	}
}

// TestPodRoutesSkipImpossibleCIDRs: a Node whose pod CIDR is the default
// route's /0, overlaps this node's own pod CIDR, or holds the node's own
// address gets no route (it would take over the node's default, bridge or
// connected route).
func TestPodRoutesSkipImpossibleCIDRs(t *testing.T) {
	hosts := append([]directory.Host{
		{Name: "all", FabricIP: "10.99.0.21", Subnet: "0.0.0.0/0"},
		{Name: "overlap", FabricIP: "10.99.0.22", Subnet: "10.244.0.0/16"},
		{Name: "self-inside", FabricIP: "10.99.0.23", Subnet: "10.99.0.0/24"},
	}, nodes...)
	got := Want(hosts, "n1")
	if len(got) != 2 || got[0].Dst.String() != "10.244.2.0/24" || got[1].Dst.String() != "10.244.3.0/24" {
		t.Errorf("Want = %v, want n2's and n3's routes only", got)
	}
}

// TestPodRoutesKeepWaitsForNodes: a restarted agent does not touch its
// routes until the Nodes have been listed (a node not listed yet is not a
// node gone); then it syncs them.
func TestPodRoutesKeepWaitsForNodes(t *testing.T) {
	ns, h := testNode(t)
	ip(t, ns, "route", "add", "10.244.3.0/24", "via", "10.99.0.13", "proto", "70")
	var listed atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Keep(ctx, h, func() []directory.Host { return nodes[:2] }, listed.Load, "n1", t.Logf)
	}()
	defer func() { cancel(); <-done }()
	time.Sleep(Period + Period/2)
	if got := routes(t, ns); !strings.Contains(got, "10.244.3.0/24") || strings.Contains(got, "10.244.2.0/24") {
		t.Fatalf("routes changed before the Nodes were listed:\n%s", got)
	}
	listed.Store(true)
	testenv.WaitWithin(t, 3*Period, "the routes to follow the listed nodes", func() bool {
		got := routes(t, ns)
		return !strings.Contains(got, "10.244.3.0/24") && strings.Contains(got, "10.244.2.0/24 via 10.99.0.12")
	})
}
