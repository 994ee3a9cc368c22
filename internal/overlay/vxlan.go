package overlay

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/state"
)

// Device names inside every host namespace.
const (
	VXLANDevice = "ffvx0"
	Bridge      = "ffbr0" // the container bridge; CNI's bridge plugin attaches containers to it
)

// SetupHost gives host h its overlay guard (guard.go), its container
// bridge and its VXLAN device with a static route, neighbour and FDB
// entry for every peer.
func SetupHost(l state.Layout, h state.Host, peers []state.Host) error {
	ns := l.HostNetNS(h.Name)
	if err := guardHost(ns); err != nil {
		return err
	}
	if err := createBridge(ns, h); err != nil {
		return fmt.Errorf("create container bridge on %s: %w", h.Name, err)
	}
	if err := setSysctls(ns); err != nil {
		return err
	}
	if err := createVXLAN(ns, h); err != nil {
		return fmt.Errorf("create VXLAN device on %s: %w", h.Name, err)
	}
	for _, p := range peers {
		if p.Name == h.Name {
			continue
		}
		if err := addPeer(ns, p); err != nil {
			return fmt.Errorf("route %s to %s over VXLAN: %w", h.Name, p.Name, err)
		}
	}
	return nil
}

// hostSysctls are the host namespace's settings, written in ns only:
// /proc/sys/net is resolved against the opening thread's namespace.
//   - forwarding: the host routes between its bridge and the VXLAN device;
//   - no ICMP redirects: a host forwards between a migrated container and
//     its other containers through the bridge they share, in and out of
//     it, which is when the kernel tells the sender to go direct; the
//     sender keeps that next hop, gone once the container moves again;
//   - the bridge answers ARP for a proxied (migrated-away) address at once,
//     not after up to proxy_delay (0.8 s) that the home host's containers'
//     retransmissions would wait too.
var hostSysctls = [][2]string{
	{"ipv4/ip_forward", "1"},
	{"ipv4/conf/all/send_redirects", "0"},
	{"ipv4/conf/" + Bridge + "/send_redirects", "0"},
	{"ipv4/neigh/" + Bridge + "/proxy_delay", "0"},
}

func setSysctls(ns string) error {
	return netns.Do(netns.Path(ns), func() error {
		for _, kv := range hostSysctls {
			if err := os.WriteFile("/proc/sys/net/"+kv[0], []byte(kv[1]+"\n"), 0o644); err != nil {
				return fmt.Errorf("set net.%s in %s: %w", strings.ReplaceAll(kv[0], "/", "."), ns, err)
			}
		}
		return nil
	})
}

// createBridge pre-creates ffbr0 with the gateway address so the host
// answers on its subnet before the first container; the CNI bridge plugin
// (bridge "ffbr0", isGateway, mtu 1450) finds it and reuses it. Its MAC is
// set (BridgeMAC): a bridge without one takes the lowest of its ports',
// so a container leaving (removed, or migrated away) could change the
// gateway's MAC under its neighbours, whose cached entries then lead
// nowhere until the kernel gives up on them, tens of seconds later.
func createBridge(ns string, h state.Host) error {
	return steps(ns,
		[]string{"link", "add", Bridge, "address", BridgeMAC(h), "mtu", mtu(), "type", "bridge"},
		[]string{"addr", "add", h.Gateway + "/24", "dev", Bridge},
		[]string{"link", "set", Bridge, "up"},
	)
}

// BridgeMAC is the MAC of host h's container bridge: locally
// administered, one per host, as the VTEP's (state.NewHost).
func BridgeMAC(h state.Host) string {
	return fmt.Sprintf("02:fe:00:00:%02x:%02x", h.Index>>8, h.Index&0xff)
}

func createVXLAN(ns string, h state.Host) error {
	return steps(ns,
		[]string{"link", "add", VXLANDevice, "type", "vxlan",
			"id", strconv.Itoa(state.VXLANID), "dstport", strconv.Itoa(state.VXLANPort),
			"local", h.FabricIP, "dev", HostUplink, "nolearning"},
		[]string{"link", "set", VXLANDevice, "address", h.VTEPMAC, "mtu", mtu(), "up"},
		[]string{"addr", "add", VTEPAddr(h) + "/32", "dev", VXLANDevice},
	)
}

func addPeer(ns string, p state.Host) error {
	vtep := VTEPAddr(p)
	if err := steps(ns,
		[]string{"route", "add", p.Subnet, "via", vtep, "dev", VXLANDevice, "onlink"},
		[]string{"neigh", "add", vtep, "lladdr", p.VTEPMAC, "dev", VXLANDevice, "nud", "permanent"},
	); err != nil {
		return err
	}
	return run("bridge", "-n", ns, "fdb", "append", p.VTEPMAC, "dev", VXLANDevice, "dst", p.FabricIP)
}

// VTEPAddr is the address of host h's VXLAN device: the network address of
// its subnet (10.244.i.0), as Flannel does.
func VTEPAddr(h state.Host) string {
	p, err := netip.ParsePrefix(h.Subnet)
	if err != nil {
		return "" // the address plan (state.NewHost) always gives a valid CIDR
	}
	return p.Masked().Addr().String()
}

func mtu() string { return strconv.Itoa(state.OverlayMTU) }
