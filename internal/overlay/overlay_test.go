package overlay

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/state"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// testCluster builds the fabric and n hosts with the overlay under a unique
// cluster name and removes every namespace when the test ends.
func testCluster(t *testing.T, n int) (state.Layout, []state.Host) {
	t.Helper()
	if why := testenv.Missing("ip", "bridge", "nsenter", "nft"); why != "" {
		t.Skip(why)
	}
	l := state.NewLayout(testenv.RandomName("t", 4))
	t.Cleanup(func() { deleteAll(t, l) })
	var hosts []state.Host
	for i := 1; i <= n; i++ {
		hosts = append(hosts, state.NewHost(i))
	}
	if err := CreateFabric(l); err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		if err := AttachHost(l, h); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range hosts {
		if err := SetupHost(l, h, hosts); err != nil {
			t.Fatal(err)
		}
	}
	return l, hosts
}

func deleteAll(t *testing.T, l state.Layout) {
	names, err := netns.List(l.Cluster + "-")
	if err != nil {
		t.Error(err)
	}
	for _, n := range names {
		if err := netns.Delete(n); err != nil {
			t.Error(err)
		}
	}
}

// attachPod makes a container-like namespace "<cluster>-p<i>" on host h's
// bridge with address 10.244.i.50 and a route to the overlay.
func attachPod(t *testing.T, l state.Layout, h state.Host) (nsPath, ip string) {
	t.Helper()
	ns := l.Cluster + "-p" + h.Name
	ip = strings.TrimSuffix(h.Gateway, ".1") + ".50"
	if err := netns.Create(ns); err != nil {
		t.Fatal(err)
	}
	host := l.HostNetNS(h.Name)
	must(t, ipIn(host, "link", "add", "v"+h.Name, "mtu", mtu(), "type", "veth", "peer", "name", "eth0", "netns", ns))
	must(t, ipIn(host, "link", "set", "v"+h.Name, "master", Bridge, "up"))
	must(t, steps(ns,
		[]string{"link", "set", "lo", "up"},
		[]string{"addr", "add", ip + "/24", "dev", "eth0"},
		[]string{"link", "set", "eth0", "up"},
		[]string{"route", "add", state.OverlayCIDR, "via", h.Gateway},
	))
	return netns.Path(ns), ip
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// txBytes reads the transmit byte counter of dev in namespace ns (bytes,
// not packets: with GSO one counted packet carries many segments).
func txBytes(t *testing.T, ns, dev string) uint64 {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns, "-j", "-s", "link", "show", dev).Output()
	must(t, err)
	var links []struct {
		Stats struct {
			TX struct{ Bytes uint64 } `json:"tx"`
		} `json:"stats64"`
	}
	must(t, json.Unmarshal(out, &links))
	if len(links) != 1 {
		t.Fatalf("ip -j link show %s in %s: %s", dev, ns, out)
	}
	return links[0].Stats.TX.Bytes
}

// TestCrossHostTCPOverVXLAN moves 4 MiB between pods on two hosts and
// checks it arrived intact and went through the sender's VXLAN device.
func TestCrossHostTCPOverVXLAN(t *testing.T) {
	l, hosts := testCluster(t, 2)
	p1, _ := attachPod(t, l, hosts[0])
	p2, ip2 := attachPod(t, l, hosts[1])
	before := txBytes(t, l.HostNetNS("h1"), VXLANDevice)

	data := make([]byte, 4<<20)
	rand.Read(data)
	got := transfer(t, p1, p2, ip2, data)
	if got != sha256.Sum256(data) {
		t.Fatal("data arrived corrupted")
	}
	sent := txBytes(t, l.HostNetNS("h1"), VXLANDevice) - before
	if sent < uint64(len(data)) {
		t.Errorf("h1's %s sent %d bytes, want at least %d: traffic did not use VXLAN", VXLANDevice, sent, len(data))
	}
}

// transfer sends data from namespace src to a listener at ip in dst and
// returns the checksum of what arrived.
func transfer(t *testing.T, src, dst, ip string, data []byte) [32]byte {
	t.Helper()
	ln, err := netns.Listen(dst, "tcp", ip+":0")
	must(t, err)
	defer ln.Close()
	sum := make(chan [32]byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(sum)
			return
		}
		defer c.Close()
		h := sha256.New()
		io.Copy(h, c)
		var s [32]byte
		copy(s[:], h.Sum(nil))
		sum <- s
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := netns.Dial(ctx, src, "tcp", ln.Addr().String())
	must(t, err)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.Copy(c, bytes.NewReader(data))
	must(t, err)
	c.Close()
	select {
	case s := <-sum:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("receiver did not finish")
	}
	return [32]byte{}
}

// TestFullSizeFrameCrossesVXLAN sends a datagram filling the 1450-byte
// container MTU with DF set: it must arrive whole, not be dropped because
// VXLAN's 50 bytes of headers overflow the fabric's 1500.
func TestFullSizeFrameCrossesVXLAN(t *testing.T) {
	l, hosts := testCluster(t, 2)
	p1, _ := attachPod(t, l, hosts[0])
	p2, ip2 := attachPod(t, l, hosts[1])
	var rx net.PacketConn
	must(t, netns.Do(p2, func() (err error) { rx, err = net.ListenPacket("udp4", ip2+":0"); return }))
	defer rx.Close()

	payload := make([]byte, state.OverlayMTU-28) // minus IPv4 and UDP headers
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tx, err := netns.Dial(ctx, p1, "udp4", rx.LocalAddr().String())
	must(t, err)
	defer tx.Close()
	raw, err := tx.(*net.UDPConn).SyscallConn()
	must(t, err)
	raw.Control(func(fd uintptr) {
		err = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
	})
	must(t, err)

	buf := make([]byte, 2048)
	for try := 0; try < 5; try++ { // the first may race the listener's setup; UDP may drop
		_, err = tx.Write(payload)
		must(t, err)
		rx.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		if n, _, err := rx.ReadFrom(buf); err == nil {
			if n != len(payload) {
				t.Fatalf("received %d bytes, want %d", n, len(payload))
			}
			return
		}
	}
	t.Fatalf("a %d-byte datagram (a full %d-byte frame) never crossed the overlay", len(payload), state.OverlayMTU)
}

// TestHostToHostOverVXLAN reaches h2's VTEP address from h1's namespace.
func TestHostToHostOverVXLAN(t *testing.T) {
	l, hosts := testCluster(t, 3)
	h1, h3 := netns.Path(l.HostNetNS("h1")), netns.Path(l.HostNetNS("h3"))
	got := transfer(t, h1, h3, VTEPAddr(hosts[2]), []byte("hello h3"))
	if got != sha256.Sum256([]byte("hello h3")) {
		t.Fatal("data arrived corrupted")
	}
}

// TestNothingInRootNamespace checks that building a cluster adds no
// interface or route to the machine's root namespace and no default route
// inside the cluster.
func TestNothingInRootNamespace(t *testing.T) {
	links, routes := rootView(t)
	l, hosts := testCluster(t, 2)
	if l2, r2 := rootView(t); l2 != links || r2 != routes {
		t.Errorf("root namespace changed:\nlinks before %s\nafter %s\nroutes before %s\nafter %s", links, l2, routes, r2)
	}
	nss := []string{l.FabricNetNS()}
	for _, h := range hosts {
		nss = append(nss, l.HostNetNS(h.Name))
	}
	for _, ns := range nss {
		out, err := exec.Command("ip", "-n", ns, "route", "show", "default").Output()
		must(t, err)
		if len(bytes.TrimSpace(out)) != 0 {
			t.Errorf("%s has a default route: %s", ns, out)
		}
	}
}

func rootView(t *testing.T) (links, routes string) {
	t.Helper()
	l, err := exec.Command("ip", "-br", "link").Output()
	must(t, err)
	r, err := exec.Command("ip", "route", "show", "table", "all").Output()
	must(t, err)
	return string(l), string(r)
}

func TestVTEPAddr(t *testing.T) {
	if got := VTEPAddr(state.NewHost(7)); got != "10.244.7.0" {
		t.Errorf("VTEPAddr(h7) = %q, want 10.244.7.0", got)
	}
}

// TestBridgeKeepsItsMACWhenPortsGo: the container bridge's MAC, the
// gateway's for every container, stays its own while containers with
// lower MACs come and go. A bridge without a set MAC takes its lowest
// port's, and when that port went (a container removed or migrated
// away) its neighbours' cached gateway MAC led nowhere: cross-host
// connections hung for tens of seconds (found by `freeflow bench --only
// migrate`).
func TestBridgeKeepsItsMACWhenPortsGo(t *testing.T) {
	l, hosts := testCluster(t, 1)
	host := l.HostNetNS(hosts[0].Name)
	mac := func() string {
		out, err := exec.Command("ip", "netns", "exec", host, "cat", "/sys/class/net/"+Bridge+"/address").Output()
		must(t, err)
		return strings.TrimSpace(string(out))
	}
	want := BridgeMAC(hosts[0])
	if got := mac(); got != want {
		t.Fatalf("bridge MAC %s, want %s", got, want)
	}
	for _, low := range []string{"02:00:00:00:00:02", "02:00:00:00:00:01"} {
		name := "vlow" + low[len(low)-1:]
		must(t, ipIn(host, "link", "add", name, "address", low, "type", "veth", "peer", "name", name+"p"))
		must(t, ipIn(host, "link", "set", name, "master", Bridge, "up"))
		if got := mac(); got != want {
			t.Errorf("with a port of MAC %s the bridge's is %s, want %s", low, got, want)
		}
	}
	must(t, ipIn(host, "link", "del", "vlow1"))
	if got := mac(); got != want {
		t.Errorf("after its lowest port went the bridge's MAC is %s, want %s", got, want)
	}
}
