package overlay

import (
	"fmt"

	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/state"
)

// FabricBridge is the bridge in the fabric namespace every host is wired to.
const FabricBridge = "fab0"

// HostUplink is a host's interface on the fabric.
const HostUplink = "eth0"

// CreateFabric makes the fabric namespace with its bridge; the namespace's
// own address (state.FabricEtcd) is where a managed etcd listens.
func CreateFabric(l state.Layout) error {
	ns := l.FabricNetNS()
	if err := netns.Create(ns); err != nil {
		return err
	}
	err := steps(ns,
		[]string{"link", "set", "lo", "up"},
		[]string{"link", "add", FabricBridge, "type", "bridge"},
		[]string{"addr", "add", state.FabricEtcd + "/24", "dev", FabricBridge},
		[]string{"link", "set", FabricBridge, "up"},
	)
	if err != nil {
		return fmt.Errorf("set up fabric in %s: %w", ns, err)
	}
	return nil
}

// AttachHost makes host h's namespace and wires it to the fabric with a veth
// pair created across the two namespaces: eth0 in the host, h<i> on fab0.
func AttachHost(l state.Layout, h state.Host) error {
	ns, fab := l.HostNetNS(h.Name), l.FabricNetNS()
	if err := netns.Create(ns); err != nil {
		return err
	}
	err := steps(ns,
		[]string{"link", "set", "lo", "up"},
		[]string{"link", "add", HostUplink, "type", "veth", "peer", "name", h.Name, "netns", fab},
		[]string{"addr", "add", h.FabricIP + "/24", "dev", HostUplink},
		[]string{"link", "set", HostUplink, "up"},
	)
	if err == nil {
		err = ipIn(fab, "link", "set", h.Name, "master", FabricBridge, "up")
	}
	if err != nil {
		return fmt.Errorf("attach host %s to the fabric: %w", h.Name, err)
	}
	return nil
}
