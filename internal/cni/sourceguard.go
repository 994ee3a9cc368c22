package cni

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"regexp"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
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
	// MuteARP drops every ARP frame too: a migrating container runs on
	// at its source until the freeze while the overlay routes its address
	// elsewhere, and must not answer for it there.
	MuteARP bool
}

// NFTables is the SourceGuard of the host the plugin runs on: the table
// "netdev freeflow" of the plugin's network namespace, programmed over
// netlink (the node may have no nft or ip program).
type NFTables struct{}

var sourceTable = &nftables.Table{Family: nftables.TableFamilyNetdev, Name: "freeflow"}

// chainName is container id's chain: ids may be long and hold characters
// nft names may not.
func chainName(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "c-" + hex.EncodeToString(sum[:8])
}

// Install replaces container id's chain with one hooked to its veth; the
// new chain and its rules go in at once.
func (n NFTables) Install(id string, p Port) error {
	veth, err := hostVeth(p.HostSide)
	if err != nil {
		return err
	}
	rules, err := sourceRules(p)
	if err != nil {
		return err
	}
	if err := n.Remove(id); err != nil {
		return err
	}
	c, err := nftables.New()
	if err != nil {
		return nftError("open a netfilter netlink socket", err)
	}
	c.AddTable(sourceTable)
	chain := c.AddChain(&nftables.Chain{
		Table:    sourceTable,
		Name:     chainName(id),
		Type:     nftables.ChainTypeFilter,
		Hooknum:  nftables.ChainHookIngress,
		Priority: nftables.ChainPriorityFilter,
		Device:   veth,
	})
	for _, r := range rules {
		c.AddRule(&nftables.Rule{Table: sourceTable, Chain: chain, Exprs: r})
	}
	if err := c.Flush(); err != nil {
		return nftError(fmt.Sprintf("add chain netdev %s %s on %s", sourceTable.Name, chain.Name, veth), err)
	}
	return nil
}

// Remove deletes container id's chain; a chain or table that is not there
// is no error, so DEL can be repeated.
func (NFTables) Remove(id string) error {
	c, err := nftables.New()
	if err != nil {
		return nftError("open a netfilter netlink socket", err)
	}
	c.DelChain(&nftables.Chain{Table: sourceTable, Name: chainName(id)})
	if err := c.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return nftError(fmt.Sprintf("delete chain netdev %s %s", sourceTable.Name, chainName(id)), err)
	}
	return nil
}

// nftError is the CNI error of a failed nftables step.
func nftError(step string, err error) error {
	return types.NewError(types.ErrInternal, "freeflow: "+step+" (the plugin needs CAP_NET_ADMIN, and a kernel with nf_tables)", err.Error())
}

// sourceRules are the rules of a chain that lets through only p's frames,
// the expressions nft makes of
//
//	ether saddr != MAC drop                      (when p has a MAC)
//	ether type arp arp saddr ether != MAC drop   (when p has a MAC)
//	ether type arp arp saddr ip != IP drop
//	ether type ip ip saddr != IP drop
//	ether type != ip ether type != arp drop
//
// and first, with MuteARP, ether type arp drop.
func sourceRules(p Port) ([][]expr.Any, error) {
	ip := p.IP.To4() // containerPort made sure of both
	var rules [][]expr.Any
	if p.MuteARP {
		rules = append(rules, etherRule(etherTypeIs(unix.ETH_P_ARP)))
	}
	if p.MAC != "" {
		mac, err := net.ParseMAC(p.MAC)
		if err != nil {
			return nil, err
		}
		rules = append(rules,
			etherRule(fieldIsNot(expr.PayloadBaseLLHeader, 6, mac)),
			etherRule(etherTypeIs(unix.ETH_P_ARP), fieldIsNot(expr.PayloadBaseNetworkHeader, 8, mac)))
	}
	return append(rules,
		etherRule(etherTypeIs(unix.ETH_P_ARP), fieldIsNot(expr.PayloadBaseNetworkHeader, 14, ip)),
		etherRule(etherTypeIs(unix.ETH_P_IP), fieldIsNot(expr.PayloadBaseNetworkHeader, 12, ip)),
		etherRule(fieldIsNot(expr.PayloadBaseLLHeader, 12, be16(unix.ETH_P_IP)), fieldIsNot(expr.PayloadBaseLLHeader, 12, be16(unix.ETH_P_ARP))),
	), nil
}

// etherRule drops Ethernet frames that match every one of matches. Like
// nft, it checks "meta iiftype ether" before it reads the Ethernet header.
func etherRule(matches ...[]expr.Any) []expr.Any {
	r := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFTYPE, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint16(unix.ARPHRD_ETHER)},
	}
	for _, m := range matches {
		r = append(r, m...)
	}
	return append(r, &expr.Verdict{Kind: expr.VerdictDrop})
}

// etherTypeIs matches frames of Ethernet type t.
func etherTypeIs(t uint16) []expr.Any {
	return field(expr.PayloadBaseLLHeader, 12, expr.CmpOpEq, be16(t))
}

// fieldIsNot matches frames whose len(v) bytes at offset of base are not v.
func fieldIsNot(base expr.PayloadBase, offset uint32, v []byte) []expr.Any {
	return field(base, offset, expr.CmpOpNeq, v)
}

func field(base expr.PayloadBase, offset uint32, op expr.CmpOp, v []byte) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: base, Offset: offset, Len: uint32(len(v))},
		&expr.Cmp{Op: op, Register: 1, Data: v},
	}
}

func be16(v uint16) []byte { return binaryutil.BigEndian.PutUint16(v) }

// ifName is what a Linux interface name may hold here; anything else in
// prevResult is refused with the name, rather than looked up.
var ifName = regexp.MustCompile(`^[A-Za-z0-9_.@-]{1,15}$`)

// hostVeth returns the veth among the host-side interfaces (the bridge
// plugin also lists the bridge): the one whose driver, as ethtool reports
// it, is veth.
func hostVeth(names []string) (string, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "", types.NewError(types.ErrInternal, "freeflow: open a socket to look up interfaces", err.Error())
	}
	defer unix.Close(fd)
	for _, n := range names {
		if !ifName.MatchString(n) {
			return "", types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("freeflow: prevResult names interface %q", n), "")
		}
		info, err := unix.IoctlGetEthtoolDrvinfo(fd, n)
		if err == nil && unix.ByteSliceToString(info.Driver[:]) == "veth" {
			return n, nil
		}
	}
	return "", types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf(
		"freeflow: no host-side veth among %v in prevResult; chain freeflow after bridge or ptp", names), "")
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
		if hw, err := net.ParseMAC(p.MAC); err != nil || len(hw) != 6 {
			return Port{}, types.NewError(types.ErrInvalidNetworkConfig, fmt.Sprintf("freeflow: prevResult gives MAC %q, not an Ethernet MAC", p.MAC), "")
		}
	}
	return p, nil
}
