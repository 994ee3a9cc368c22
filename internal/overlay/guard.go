package overlay

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/state"
)

// The overlay guard (docs/ARCHITECTURE.md, "What a container can put on
// the overlay"). The kernel's VXLAN socket listens on port 4789 of every
// address of the host, its gateway on the container bridge included, and
// decapsulates whatever reaches it: a container that sends a VXLAN
// datagram to its gateway, or through the host's forwarding to another
// host, has its inner packet delivered with any source it wrote. So every
// host namespace accepts VXLAN only from the fabric, and forwards nothing
// from its containers outside the overlay (they have no route to the
// fabric, but a frame sent to the gateway's MAC needs none). The source
// of each container's own packets is checked where they enter the host,
// per container, by the CNI plugin (internal/cni/sourceguard.go).
//
// The rules live in the table "ip freeflow" of the host's namespace and go
// with it (`freeflow cluster down`).
const guardTable = "freeflow"

// guardRules is the nft script of a host namespace's table: written
// whole, replacing any earlier one, in one transaction.
func guardRules() string {
	return fmt.Sprintf(`add table ip %[1]s
delete table ip %[1]s
table ip %[1]s {
	chain input {
		type filter hook input priority filter; policy accept;
		udp dport %[2]d iifname != %[3]q drop
		udp dport %[2]d ip saddr != %[4]s drop
	}
	chain forward {
		type filter hook forward priority filter; policy accept;
		iifname %[5]q ip daddr != %[6]s drop
	}
}
`, guardTable, state.VXLANPort, HostUplink, state.FabricCIDR, Bridge, state.OverlayCIDR)
}

// guardHost installs the overlay guard in host namespace ns. It runs
// before forwarding is enabled and the VXLAN device exists, so there is no
// moment without it.
func guardHost(ns string) error {
	var out bytes.Buffer
	cmd := netns.Command(netns.Path(ns), "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(guardRules())
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("install the overlay guard (nft table ip %s) in %s: %w: %s (is the nftables package installed?)",
			guardTable, ns, err, strings.TrimSpace(out.String()))
	}
	return nil
}
