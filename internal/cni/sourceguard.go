package cni

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// The source guard (docs/ARCHITECTURE.md, "What a container can put on
// the overlay"): what a container sends enters its host through the
// host-side end of its veth, and there, before the bridge or the host's
// routing see it, an nftables ingress chain drops every frame that does
// not come from the container's own MAC and address: IPv4 with another
// source, ARP with another sender, any other protocol (IPv6, VLAN tags;
// the overlay is IPv4). It is the CNI bridge plugin's macspoofchk taken to
// the IP and ARP layer, as Calico and Cilium check each workload's source.
// One chain per container, hooked to its veth alone, so a frame meets one
// chain whatever the number of containers; the plugin adds it on ADD and
// deletes it on DEL (the kernel keeps a chain whose device is gone).

// SourceGuard installs and removes the per-container source checks; unit
// tests replace it with a fake.
type SourceGuard interface {
	Install(id string, p Port) error
	Remove(id string) error
}

// Port is what the guard checks a container's frames against.
type Port struct {
	HostSide []string // interfaces outside the sandbox in prevResult: the container's veth is one of them
	MAC      string   // the container interface's MAC ("" if prevResult has none)
	IP       net.IP   // the container's IPv4 address
}

// NFTables is the SourceGuard of the host the plugin runs on: the table
// "netdev freeflow" of the plugin's network namespace.
type NFTables struct{}

const sourceTable = "freeflow"

// chainName is container id's chain: ids may be long and hold characters
// nft names may not.
func chainName(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "c-" + hex.EncodeToString(sum[:8])
}

// Install replaces container id's chain with one hooked to its veth.
func (n NFTables) Install(id string, p Port) error {
	veth, err := hostVeth(p.HostSide)
	if err != nil {
		return err
	}
	if err := n.Remove(id); err != nil {
		return err
	}
	return nft(sourceRules(chainName(id), veth, p))
}

// Remove deletes container id's chain; a chain that is not there is no
// error, so DEL can be repeated.
func (NFTables) Remove(id string) error {
	err := nft(fmt.Sprintf("delete chain netdev %s %s\n", sourceTable, chainName(id)))
	if err != nil && strings.Contains(err.Error(), "No such file or directory") {
		return nil
	}
	return err
}

// sourceRules is the nft script that creates chain on veth's ingress.
func sourceRules(chain, veth string, p Port) string {
	var b strings.Builder
	fmt.Fprintf(&b, "add table netdev %s\n", sourceTable)
	fmt.Fprintf(&b, "add chain netdev %s %s { type filter hook ingress device %q priority filter; policy accept; }\n",
		sourceTable, chain, veth)
	rule := func(r string) { fmt.Fprintf(&b, "add rule netdev %s %s %s\n", sourceTable, chain, r) }
	if p.MAC != "" {
		rule("ether saddr != " + p.MAC + " drop")
		rule("ether type arp arp saddr ether != " + p.MAC + " drop")
	}
	rule("ether type arp arp saddr ip != " + p.IP.String() + " drop")
	rule("ether type ip ip saddr != " + p.IP.String() + " drop")
	rule("ether type != { ip, arp } drop")
	return b.String()
}

// ifName is what a Linux interface name may hold here; anything else in
// prevResult is refused rather than written into an nft script.
var ifName = regexp.MustCompile(`^[A-Za-z0-9_.@-]{1,15}$`)

// hostVeth returns the veth among the host-side interfaces (the bridge
// plugin also lists the bridge).
func hostVeth(names []string) (string, error) {
	for _, n := range names {
		if !ifName.MatchString(n) {
			return "", types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("freeflow: prevResult names interface %q", n), "")
		}
		out, err := exec.Command("ip", "-d", "-j", "link", "show", "dev", n).Output()
		if err != nil {
			continue
		}
		var links []struct {
			LinkInfo struct {
				Kind string `json:"info_kind"`
			} `json:"linkinfo"`
		}
		if json.Unmarshal(out, &links) == nil && len(links) == 1 && links[0].LinkInfo.Kind == "veth" {
			return n, nil
		}
	}
	return "", types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(
		"freeflow: no host-side veth among %v in prevResult; chain freeflow after bridge or ptp", names), "")
}

// nft runs an nft script in the plugin's network namespace.
func nft(script string) error {
	var out bytes.Buffer
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return types.NewError(types.ErrInternal, "freeflow: nft (is the nftables package installed?)",
			fmt.Sprintf("%v: %s", err, strings.TrimSpace(out.String())))
	}
	return nil
}

// containerPort reads the container's port from prevResult: ip is the
// address containerIP chose.
func containerPort(res *current.Result, ip net.IP) (Port, error) {
	if ip.To4() == nil {
		return Port{}, types.NewError(types.ErrInvalidNetworkConfig,
			fmt.Sprintf("freeflow: container address %s is not IPv4; the overlay is IPv4", ip), "")
	}
	p := Port{IP: ip.To4()}
	for _, ipc := range res.IPs {
		if ipc.Address.IP.Equal(ip) && ipc.Interface != nil && *ipc.Interface >= 0 && *ipc.Interface < len(res.Interfaces) {
			p.MAC = res.Interfaces[*ipc.Interface].Mac
		}
	}
	for _, i := range res.Interfaces {
		if i.Sandbox == "" {
			p.HostSide = append(p.HostSide, i.Name)
		}
	}
	if p.MAC != "" {
		if _, err := net.ParseMAC(p.MAC); err != nil {
			return Port{}, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("freeflow: prevResult gives MAC %q", p.MAC), "")
		}
	}
	return p, nil
}
