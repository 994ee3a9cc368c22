package ffspec

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/freeflow-net/freeflow/internal/verbsid"
)

// The virtual verbs device (docs/VERBS.md): a FreeFlow container has
// device ffv0, which the stock libibverbs finds through the container's
// own sysfs tree (SYSFS_PATH) and serves with FreeFlow's provider
// (RDMAV_DRIVERS). There is no kernel device behind it: the character
// device libibverbs opens is /dev/null, whose numbers the tree names.
const (
	ProviderName = "libffv-rdmav34.so"
	// libibverbs appends "-rdmav34.so" to an absolute RDMAV_DRIVERS entry.
	providerEnv   = "RDMAV_DRIVERS=" + LibDir + "/libffv"
	containerProv = LibDir + "/" + ProviderName
	// ContainerVerbs is where a container sees its device's sysfs tree.
	ContainerVerbs  = "/run/freeflow-verbs"
	sysfsEnv        = "SYSFS_PATH=" + ContainerVerbs + "/sys"
	verbsDeviceName = "ffv0"
	verbsDeviceNode = "/dev/infiniband/uverbs0"
	// librdmacm's command file, answered by the library too (docs/VERBS.md, "rdma_cm").
	rdmaCMNode       = "/dev/infiniband/rdma_cm"
	verbsDeviceNumbs = "1:3" // /dev/null's
)

// sysfsHex writes b as sysfs does GUIDs and GIDs: groups of four hex digits.
func sysfsHex(b []byte) string {
	var g []string
	for i := 0; i+1 < len(b); i += 2 {
		g = append(g, fmt.Sprintf("%02x%02x", b[i], b[i+1]))
	}
	return strings.Join(g, ":")
}

// WriteVerbsTree writes the sysfs files libibverbs reads for device ffv0
// of the container at ip under dir/sys (docs/VERBS.md, "Discovery").
// ifname is the container's interface that holds ip: the device's network
// interface (device/net/<ifname>, as an HCA's lists its IPoIB or Ethernet
// interface), where rdma_cm addresses it and GID 0 comes from.
func WriteVerbsTree(dir, ip, ifname string) error {
	if ifname == "" || strings.ContainsAny(ifname, "/\x00") || ifname == "." || ifname == ".." {
		return fmt.Errorf("verbs device tree: bad interface name %q for %s", ifname, ip)
	}
	lid, guid, gid, err := verbsid.Identity(ip)
	if err != nil {
		return err
	}
	g := make([]byte, 8)
	for i := range g {
		g[i] = byte(guid >> (56 - 8*i))
	}
	port := filepath.Join("class/infiniband", verbsDeviceName, "ports/1")
	files := map[string]string{
		"class/infiniband_verbs/abi_version":                                 "6",
		"class/infiniband_verbs/uverbs0/ibdev":                               verbsDeviceName,
		"class/infiniband_verbs/uverbs0/dev":                                 verbsDeviceNumbs,
		"class/infiniband_verbs/uverbs0/abi_version":                         "1",
		"class/misc/rdma_cm/abi_version":                                     "4", // librdmacm's check
		filepath.Join("class/infiniband", verbsDeviceName, "node_type"):      "1: CA",
		filepath.Join("class/infiniband", verbsDeviceName, "node_guid"):      sysfsHex(g),
		filepath.Join("class/infiniband", verbsDeviceName, "sys_image_guid"): sysfsHex(g),
		filepath.Join(port, "lid"):                                           fmt.Sprintf("0x%x", lid),
		filepath.Join(port, "state"):                                         "4: ACTIVE",
		filepath.Join(port, "link_layer"):                                    "InfiniBand",
		filepath.Join(port, "gids/0"):                                        sysfsHex(gid),
		filepath.Join(port, "gid_attrs/types/0"):                             "IB/RoCE v1",
		filepath.Join(port, "pkeys/0"):                                       "0xffff",
	}
	// A directory, as the kernel's is: tools list device/net/ for the name.
	if err := os.MkdirAll(filepath.Join(dir, "sys/class/infiniband", verbsDeviceName, "device/net", ifname), 0o755); err != nil {
		return fmt.Errorf("verbs device tree: %w", err)
	}
	for name, v := range files {
		p := filepath.Join(dir, "sys", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("verbs device tree: %w", err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o444); err != nil {
			return fmt.Errorf("verbs device tree: %w", err)
		}
	}
	return nil
}

// Verbs returns the mounts and environment of a container's verbs device:
// its tree (written by WriteVerbsTree into treeDir), the provider and the
// device nodes (uverbs0 and rdma_cm, both /dev/null: the library answers
// their commands), read-only, and the variables that point libibverbs at them.
func Verbs(treeDir, provider string) ([]Mount, []string) {
	return []Mount{
		{Destination: ContainerVerbs, Type: "bind", Source: treeDir, Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}},
		{Destination: containerProv, Type: "bind", Source: provider, Options: []string{"bind", "ro"}},
		{Destination: verbsDeviceNode, Type: "bind", Source: "/dev/null", Options: []string{"bind"}},
		{Destination: rdmaCMNode, Type: "bind", Source: "/dev/null", Options: []string{"bind"}},
	}, VerbsEnv()
}

// What UCX and Open MPI need to use the device, so users need not set it
// (docs/VERBS.md, "UCX and Open MPI"); appended after the container's own
// environment, a value the user gave comes first and wins.
const (
	// Open MPI's UCX components open only devices named mlx* by default.
	ompiUCXDevicesEnv = "OMPI_MCA_opal_common_ucx_devices=any"
	// UCX allocates buffers in SysV or POSIX shared memory first and then
	// registers them with every device; the device cannot register shared
	// memory for remote access (docs/VERBS.md): private memory instead.
	ucxAllocEnv = "UCX_ALLOC_PRIO=thp,mmap,heap"
)

// VerbsEnv is the environment that points libibverbs at the device, and
// UCX and Open MPI at it.
func VerbsEnv() []string { return []string{sysfsEnv, providerEnv, ompiUCXDevicesEnv, ucxAllocEnv} }
