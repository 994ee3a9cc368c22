package cni

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

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

// ConfList returns host h's network configuration list: the bridge (see
// BridgePlugin), then the freeflow plugin.
func ConfList(l state.Layout, h state.Host) ([]byte, error) {
	return marshalList(NetworkName, BridgePlugin(l, h), map[string]any{
		"type":        PluginType,
		"agentSocket": l.AdminSocket(h.Name),
		"host":        h.Name,
		"cluster":     l.Cluster,
	})
}

// BridgePlugin is the first plugin of host h's list: bridge with
// host-local IPAM on the host's subnet (gateway: the bridge), reservations
// kept under the host's directory.
func BridgePlugin(l state.Layout, h state.Host) map[string]any {
	return map[string]any{
		"type":        "bridge",
		"bridge":      BridgeName,
		"isGateway":   true,
		"ipMasq":      false,
		"mtu":         state.OverlayMTU,
		"hairpinMode": false,
		"ipam": map[string]any{
			"type":   "host-local",
			"ranges": [][]map[string]string{{{"subnet": h.Subnet, "gateway": h.Gateway}}},
			// Containers reach the whole overlay through their bridge;
			// nothing else is routed (there is no way out of the cluster).
			"routes":  []map[string]string{{"dst": state.OverlayCIDR, "gw": h.Gateway}},
			"dataDir": IPAMDir(l, h.Name),
		},
	}
}

// BridgeConfList is a configuration list of the bridge plugin alone, named
// name: the overlay without FreeFlow (the Kubernetes test harness's CNI
// before FreeFlow is installed).
func BridgeConfList(l state.Layout, h state.Host, name string) ([]byte, error) {
	return marshalList(name, BridgePlugin(l, h))
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
	if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, want) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create CNI configuration directory: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, want, 0o644); err != nil {
		return fmt.Errorf("write CNI configuration: %w", err)
	}
	return os.Rename(tmp, path)
}
