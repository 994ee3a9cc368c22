package e2e

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/state"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// udpSinkPy binds UDP port argv[1], prints "ready", then "got <source>
// <payload>" for every datagram it receives.
const udpSinkPy = `
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", int(sys.argv[1])))
print("ready", flush=True)
while True:
    b, a = s.recvfrom(2048)
    print("got", a[0], b.decode(errors="replace"), flush=True)
`

// injectPy forges overlay traffic to a blue container at argv[2]:argv[3].
//
//	vxlan NAME BLUE PORT VTEPMACS TARGETS...  (an ordinary UDP socket, as any
//	    container process can) sends a VXLAN datagram (VNI 42) to port 4789
//	    of each target, for each forged source and each VTEP MAC as the inner
//	    destination (so whichever host decapsulates it routes it on), the
//	    inner IPv4/UDP packet addressed to BLUE:PORT; prints "<target>
//	    unreachable <error>" where it cannot send. Then a datagram with its
//	    own source: "control NAME".
//	raw NAME BLUE PORT VTEPMACS GWMAC GWIP  (needs CAP_NET_RAW) sends Ethernet
//	    frames to the gateway: UDP to BLUE:PORT with each forged source, once
//	    with its own MAC and once with a forged one; VXLAN datagrams with its
//	    own source to both hosts' fabric addresses (no route leads there, the
//	    frame goes to the gateway anyway); an ARP reply claiming BLUE's
//	    address; then a frame with its own source: "control raw NAME".
//
// Forged payloads say "forged ..."; the blue sink must print none of them.
const injectPy = `
import fcntl, socket, struct, sys
mode, name, blue, port, macs = sys.argv[1:6]
port = int(port)
FORGED = ["10.244.2.99", "10.244.1.250"]
FABRIC = ["10.99.0.11", "10.99.0.12"]
def mac(m): return bytes.fromhex(m.replace(":", ""))
def csum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
def ipv4(src, dst, sport, dport, payload):
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0x4000, 64, 17, 0,
                    socket.inet_aton(src), socket.inet_aton(dst))
    return h[:10] + struct.pack("!H", csum(h)) + h[12:] + udp
def vxlan(inner_dmac, src, why):
    inner = mac(inner_dmac) + mac("02:00:00:00:00:99") + b"\x08\x00" + \
        ipv4(src, blue, 5555, port, ("forged %s %s" % (src, why)).encode())
    return struct.pack("!II", 0x08000000, 42 << 8) + inner
if mode == "vxlan":
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for t in sys.argv[6:]:
        for m in macs.split(","):
            for src in FORGED:
                try:
                    s.sendto(vxlan(m, src, "vxlan-to-%s from %s" % (t, name)), (t, 4789))
                except OSError as e:
                    print(t, "unreachable", e, flush=True)
    s.sendto(("control " + name).encode(), (blue, port))
else:
    gwmac, gwip = mac(sys.argv[6]), sys.argv[7]
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind(("eth0", 0))
    own = fcntl.ioctl(s, 0x8927, struct.pack("256s", b"eth0"))[18:24]  # SIOCGIFHWADDR
    ownip = socket.inet_ntoa(fcntl.ioctl(s, 0x8915, struct.pack("256s", b"eth0"))[20:24])  # SIOCGIFADDR
    def frame(smac, packet): s.send(gwmac + smac + b"\x08\x00" + packet)
    for src in FORGED:
        frame(own, ipv4(src, blue, 5555, port, ("forged %s raw from %s" % (src, name)).encode()))
        frame(mac("02:00:00:00:00:98"), ipv4(src, blue, 5555, port, ("forged %s raw-mac from %s" % (src, name)).encode()))
        for f in FABRIC:
            for m in macs.split(","):
                frame(own, ipv4(ownip, f, 5556, 4789, vxlan(m, src, "fabric %s from %s" % (f, name))))
    arp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 2) + own + socket.inet_aton(blue) + gwmac + socket.inet_aton(gwip)
    s.send(gwmac + own + b"\x08\x06" + arp)
    frame(own, ipv4(ownip, blue, 5557, port, ("control raw " + name).encode()))
`

// TestContainerCannotInjectOverlayPackets: red containers on both hosts
// try to put packets on the overlay that claim another source. With what
// `freeflow run` gives them (uid 0, no CAP_NET_RAW) they send forged VXLAN
// datagrams to port 4789 of every address of their own host and of the
// other host they can reach (gateways, VXLAN addresses) and of the fabric.
// A container cannot open raw sockets, so to check the per-container
// source rules too, the test runs the same attacker with CAP_NET_RAW
// inside the red containers' network namespaces (nsenter from the host's
// tools, as a container holding CAP_NET_RAW could): frames with forged
// source addresses, with a forged MAC, VXLAN datagrams to the fabric
// addresses through the gateway, and an ARP reply claiming the blue
// container's address. The blue container listening must receive the
// control datagrams and nothing forged, and the host's ARP entry for it
// must still name it.
func TestContainerCannotInjectOverlayPackets(t *testing.T) {
	c := newCluster(t, 2)
	l := state.NewLayout(c.Name)
	h1, h2 := state.NewHost(1), state.NewHost(2)
	c.StartDetached(t, "h2", "blue", []string{"--tenant", "blue"}, "python3", "-c", udpSinkPy, "7009")
	waitLog(t, c, "blue", "ready")
	runIdle(t, c, "h1", "red1", "red")
	runIdle(t, c, "h2", "red2", "red")
	blue := containerIP(t, c, "blue")
	macs := h1.VTEPMAC + "," + h2.VTEPMAC
	targets := []string{h1.Gateway, overlayVTEP(h1), h2.Gateway, overlayVTEP(h2), h1.FabricIP, h2.FabricIP}

	for _, red := range []struct {
		name string
		host state.Host
	}{{"red1", h1}, {"red2", h2}} {
		c.MustFF(t, append([]string{"exec", red.name, "--", "python3", "-c", injectPy, "vxlan", red.name, blue, "7009", macs}, targets...)...)
		gwMAC := linkMAC(t, l.HostNetNS(red.host.Name), "ffbr0")
		raw := netns.Command(state.NetNSPath(l.ContainerNetNS(red.name)), "python3", "-c", injectPy,
			"raw", red.name, blue, "7009", macs, gwMAC, red.host.Gateway)
		out, err := raw.CombinedOutput()
		must(t, err, "raw attacker in %s's network namespace: %s", red.name, out)
	}
	// Each attacker sent its control last, after every forged datagram,
	// on the same path or a shorter one, from one thread: once all controls
	// are in, whatever forged packet got through is in too. A control that
	// never comes went elsewhere: the ARP claim took blue's address.
	controls := []string{"control red1", "control red2", "control raw red1", "control raw red2"}
	logs := awaitLines(t, c, "blue", controls)
	if strings.Contains(logs, "forged") {
		t.Errorf("the blue container received forged packets:\n%s", logs)
	}
	if n := strings.Count(logs, "got "); n != len(controls) {
		t.Errorf("the blue container received %d datagrams, want the %d controls:\n%s", n, len(controls), logs)
	}
	red2MAC := linkMAC(t, l.ContainerNetNS("red2"), "eth0")
	if neigh := ipOut(t, "-n", l.HostNetNS("h2"), "neigh", "show", blue); strings.Contains(neigh, red2MAC) {
		t.Errorf("h2's ARP entry for blue (%s) names red2's MAC %s: %s", blue, red2MAC, neigh)
	}
	// CNI DEL removes each container's checks.
	for _, name := range []string{"red1", "red2", "blue"} {
		c.MustFF(t, "rm", "-f", name)
	}
	for _, h := range []string{"h1", "h2"} {
		out, err := netns.Command(state.NetNSPath(l.HostNetNS(h)), "nft", "list", "table", "netdev", "freeflow").CombinedOutput()
		must(t, err, "nft list table netdev freeflow in %s: %s", h, out)
		if strings.Contains(string(out), "chain") {
			t.Errorf("%s keeps source checks of removed containers:\n%s", h, out)
		}
	}
}

// awaitLines waits up to 10 s for container name to print every line and
// returns its output then, whether or not they all came.
func awaitLines(t *testing.T, c *testenv.Cluster, name string, lines []string) string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		logs, all := c.MustFF(t, "logs", name), true
		for _, l := range lines {
			all = all && strings.Contains(logs, l)
		}
		if all || time.Now().After(deadline) {
			return logs
		}
	}
}

// overlayVTEP is host h's VXLAN device address, 10.244.i.0.
func overlayVTEP(h state.Host) string { return strings.TrimSuffix(h.Gateway, "1") + "0" }

// linkMAC returns the MAC address of dev in network namespace ns.
func linkMAC(t *testing.T, ns, dev string) string {
	t.Helper()
	var links []struct {
		Address string `json:"address"`
	}
	out := ipOut(t, "-n", ns, "-j", "link", "show", dev)
	must(t, json.Unmarshal([]byte(out), &links), "parse ip -j link show %s: %s", dev, out)
	if len(links) != 1 {
		t.Fatalf("ip -n %s link show %s: %s", ns, dev, out)
	}
	return links[0].Address
}

// ipOut runs ip with args and returns its output.
func ipOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	must(t, err, "ip %s: %s", strings.Join(args, " "), out)
	return string(out)
}
