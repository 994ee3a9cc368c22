package ffspec

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteVerbsTree(t *testing.T) {
	dir := t.TempDir()
	if err := WriteVerbsTree(dir, "10.244.2.7", "eth0"); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"class/infiniband_verbs/uverbs0/ibdev":  "ffv0",
		"class/infiniband_verbs/uverbs0/dev":    "1:3",
		"class/infiniband/ffv0/node_guid":       "02ff:ff00:0af4:0207",
		"class/infiniband/ffv0/ports/1/lid":     "0x207",
		"class/infiniband/ffv0/ports/1/gids/0":  "0000:0000:0000:0000:0000:ffff:0af4:0207",
		"class/infiniband/ffv0/ports/1/pkeys/0": "0xffff",
		"class/infiniband_verbs/abi_version":    "6",
		"class/misc/rdma_cm/abi_version":        "4",
	} {
		b, err := os.ReadFile(filepath.Join(dir, "sys", name))
		if err != nil || string(b) != want+"\n" {
			t.Errorf("%s: %q (%v), want %q", name, b, err, want)
		}
	}
}

func TestVerbsMountsRdmaCM(t *testing.T) {
	mounts, _ := Verbs("/tree", "/lib/prov.so")
	found := map[string]Mount{}
	for _, m := range mounts {
		found[m.Destination] = m
	}
	for _, dev := range []string{"/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"} {
		m, ok := found[dev]
		if !ok || m.Source != "/dev/null" || m.Type != "bind" {
			t.Errorf("%s: %+v (present %v), want a bind of /dev/null", dev, m, ok)
		}
	}
}

// TestVerbsTreeNamesTheNetInterface: rdma-core's rdma_cm tests (base.py)
// take the first entry of the device's device/net/ as the interface whose
// address they connect to, and skip ("doesn't have net interface") without
// one: the tree lists the container's interface there, a directory as in
// the kernel's sysfs, and only it.
func TestVerbsTreeNamesTheNetInterface(t *testing.T) {
	dir := t.TempDir()
	if err := WriteVerbsTree(dir, "10.244.2.7", "net1"); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(filepath.Join(dir, "sys/class/infiniband/ffv0/device/net"))
	if err != nil || len(ents) != 1 || ents[0].Name() != "net1" || !ents[0].IsDir() {
		t.Fatalf("device/net: %v (%v), want the one directory net1", ents, err)
	}
	for _, bad := range []string{"", "..", "a/b"} {
		if err := WriteVerbsTree(t.TempDir(), "10.244.2.7", bad); err == nil {
			t.Errorf("interface %q: no error", bad)
		}
	}
}
