package cni

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/freeflow-net/freeflow/internal/atomicfile"
	"github.com/freeflow-net/freeflow/internal/state"
)

// NetworkName is the name of FreeFlow's network configuration list.
const NetworkName = "freeflow"

// PluginType is the freeflow plugin's type, the name of its binary. (Not
// "freeflow": libcni runs the type as a program found in the plugin path,
// and the plugin path includes the directory of the freeflow CLI.)
const PluginType = "freeflow-cni"

// BridgeName is the per-host Linux bridge the containers of a host attach to.
const BridgeName = "ffbr0"

// ConfListFile is the configuration list of host h.
func ConfListFile(l state.Layout, h string) string {
	return filepath.Join(l.CNIConfDir(h), NetworkName+".conflist")
}

// IPAMDir keeps host-local's address reservations under the host's
// directory, so they go away with the cluster.
func IPAMDir(l state.Layout, h string) string { return filepath.Join(l.HostDir(h), "ipam") }

// cacheDir is libcni's result cache for host h (also cleaned with the cluster).
func cacheDir(l state.Layout, h string) string { return filepath.Join(l.HostDir(h), "cni-cache") }

// Node is what a node's configuration list names: the subnet its
// containers get addresses from, and the agent that registers them.
type Node struct {
	Name    string // the host or Kubernetes node, as the directory records it
	Cluster string
	Subnet  string // containers' addresses (host-local), e.g. 10.244.1.0/24
	Gateway string // the bridge's address in Subnet
	// Routes are the destinations containers reach through the gateway.
	Routes      []string
	IPAMDir     string // host-local's reservations ("" = its default, /var/lib/cni/networks)
	AdminSocket string // the node agent's admin socket
}

// HostNode is host h of a CLI cluster as a Node: containers reach the whole
// overlay through their bridge and nothing else is routed (there is no way
// out of the cluster); reservations are kept under the host's directory.
func HostNode(l state.Layout, h state.Host) Node {
	return Node{Name: h.Name, Cluster: l.Cluster, Subnet: h.Subnet, Gateway: h.Gateway,
		Routes: []string{state.OverlayCIDR}, IPAMDir: IPAMDir(l, h.Name), AdminSocket: l.AdminSocket(h.Name)}
}

// ConfList returns host h's network configuration list (NodeConfList).
func ConfList(l state.Layout, h state.Host) ([]byte, error) {
	return NodeConfList(HostNode(l, h))
}

// NodeConfList returns node n's network configuration list: the bridge
// (BridgePlugin), then the freeflow plugin.
func NodeConfList(n Node) ([]byte, error) {
	return marshalList(NetworkName, BridgePlugin(n), map[string]any{
		"type":        PluginType,
		"agentSocket": n.AdminSocket,
		"host":        n.Name,
		"cluster":     n.Cluster,
	})
}

// BridgePlugin is the first plugin of node n's list: bridge with
// host-local IPAM on n's subnet (gateway: the bridge).
func BridgePlugin(n Node) map[string]any {
	routes := []map[string]string{}
	for _, dst := range n.Routes {
		routes = append(routes, map[string]string{"dst": dst, "gw": n.Gateway})
	}
	ipam := map[string]any{
		"type":   "host-local",
		"ranges": [][]map[string]string{{{"subnet": n.Subnet, "gateway": n.Gateway}}},
		"routes": routes,
	}
	if n.IPAMDir != "" {
		ipam["dataDir"] = n.IPAMDir
	}
	return map[string]any{
		"type":        "bridge",
		"bridge":      BridgeName,
		"isGateway":   true,
		"ipMasq":      false,
		"mtu":         state.OverlayMTU,
		"hairpinMode": false,
		"ipam":        ipam,
	}
}

// BridgeConfList is a configuration list of the bridge plugin alone, named
// name: the overlay without FreeFlow (the Kubernetes test harness's CNI
// before FreeFlow is installed).
func BridgeConfList(l state.Layout, h state.Host, name string) ([]byte, error) {
	return marshalList(name, BridgePlugin(HostNode(l, h)))
}

func marshalList(name string, plugins ...any) ([]byte, error) {
	list := map[string]any{"cniVersion": "1.0.0", "name": name, "plugins": plugins}
	b, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// WriteConfList writes host h's configuration list unless it is already
// there with the same content.
func WriteConfList(l state.Layout, h state.Host) error {
	want, err := ConfList(l, h)
	if err != nil {
		return fmt.Errorf("build CNI configuration for %s: %w", h.Name, err)
	}
	path := ConfListFile(l, h.Name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create CNI configuration directory: %w", err)
	}
	if _, err := atomicfile.Update(path, want, 0o644); err != nil {
		return fmt.Errorf("write CNI configuration: %w", err)
	}
	return nil
}
