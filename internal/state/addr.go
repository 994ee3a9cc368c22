package state

import "fmt"

// The address plan. Every cluster lives in its own namespaces, so two
// clusters may use the same addresses without meeting; none of these
// addresses is ever routed from the machine's root namespace.
const (
	FabricCIDR  = "10.99.0.0/24"  // host (and etcd) addresses on the fabric bridge
	FabricEtcd  = "10.99.0.2"     // the fabric namespace's own address, where managed etcd listens
	OverlayCIDR = "10.244.0.0/16" // containers: host i owns 10.244.i.0/24
	OverlayMTU  = 1450            // 1500 minus VXLAN's 50 bytes, so full frames are not dropped
	VXLANID     = 42
	VXLANPort   = 4789
	EtcdPort    = 2379
	MaxHosts    = 200
)

// NewHost returns host number i (1-based) of the address plan.
func NewHost(i int) Host {
	return Host{
		Name:     fmt.Sprintf("h%d", i),
		Index:    i,
		FabricIP: fmt.Sprintf("10.99.0.%d", 10+i),
		Subnet:   fmt.Sprintf("10.244.%d.0/24", i),
		Gateway:  fmt.Sprintf("10.244.%d.1", i),
		VTEPMAC:  fmt.Sprintf("02:ff:00:00:%02x:%02x", i>>8, i&0xff),
	}
}
