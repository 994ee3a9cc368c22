package cni

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/netns"
)

// A node may have neither nft nor ip (the plugin binary is copied onto
// it): with an empty PATH the source guard finds the container's veth
// beside a bridge, installs its chain, installs it again as a repeated
// ADD does, and removes it, twice. nft, run by the test, lists the rules
// the plugin's nft script used to add.
func TestSourceGuardWithoutNftOrIp(t *testing.T) {
	ns := hostNetns(t)
	path := "/run/netns/" + ns
	runIP(t, "-n", ns, "link", "add", "br0", "type", "bridge")
	runIP(t, "-n", ns, "link", "add", "vh0", "type", "veth", "peer", "name", "vc0")
	p := Port{HostSide: []string{"br0", "vh0"}, MAC: "02:42:0a:f4:01:07", IP: net.ParseIP("10.244.1.7")}
	g := NFTables{}
	inNetns := func(what string, fn func() error) {
		t.Helper()
		if err := netns.Do(path, fn); err != nil {
			t.Fatalf("%s with an empty PATH: %v", what, err)
		}
	}
	list := func() string {
		t.Helper()
		out, err := exec.Command("ip", "netns", "exec", ns, "nft", "list", "table", "netdev", "freeflow").CombinedOutput()
		if err != nil {
			t.Fatalf("nft list table netdev freeflow: %v: %s", err, out)
		}
		return string(out)
	}
	emptyPATH(t, func() {
		inNetns("remove before any install", func() error { return g.Remove("c1") })
		for range 2 {
			inNetns("install", func() error { return g.Install("c1", p) })
		}
	})
	got := list()
	if n := strings.Count(got, "chain "); n != 1 {
		t.Errorf("after two installs, %d chains, want 1:\n%s", n, got)
	}
	for _, want := range []string{
		"chain " + chainName("c1") + " {",
		`type filter hook ingress device "vh0" priority filter; policy accept;`,
		"ether saddr != 02:42:0a:f4:01:07 drop",
		"arp saddr ether != 02:42:0a:f4:01:07 drop",
		"arp saddr ip != 10.244.1.7 drop",
		"ip saddr != 10.244.1.7 drop",
		"ether type != ip ether type != arp drop",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("nft lists no %q:\n%s", want, got)
		}
	}
	// A migrating container's ARP muted (TestMigrate, the moving client's
	// slowest reply), then back as it was.
	muted := p
	muted.MuteARP = true
	emptyPATH(t, func() { inNetns("install muted", func() error { return g.Install("c1", muted) }) })
	if got := list(); !strings.Contains(got, "ether type arp drop") || !strings.Contains(got, "ip saddr != 10.244.1.7 drop") {
		t.Errorf("muted: want every ARP frame dropped and the other checks kept:\n%s", got)
	}
	emptyPATH(t, func() { inNetns("install unmuted", func() error { return g.Install("c1", p) }) })
	if got := list(); strings.Contains(got, "ether type arp drop") {
		t.Errorf("unmuted, ARP is still dropped:\n%s", got)
	}
	emptyPATH(t, func() {
		for range 2 {
			inNetns("remove", func() error { return g.Remove("c1") })
		}
	})
	if got := list(); strings.Contains(got, "chain") {
		t.Errorf("after remove:\n%s", got)
	}
}

// emptyPATH runs fn with PATH naming an empty directory.
func emptyPATH(t *testing.T, fn func()) {
	t.Helper()
	old := os.Getenv("PATH")
	t.Setenv("PATH", t.TempDir())
	defer os.Setenv("PATH", old)
	fn()
}

// hostNetns makes a network namespace for a test, removed when it ends.
func hostNetns(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace")
	}
	for _, b := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("needs %s on the PATH: %v", b, err)
		}
	}
	name := fmt.Sprintf("fftcni%d", os.Getpid())
	runIP(t, "netns", "add", name)
	t.Cleanup(func() { runIP(t, "netns", "del", name) })
	return name
}

func runIP(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}
