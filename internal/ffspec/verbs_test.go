package ffspec

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteVerbsTree(t *testing.T) {
	dir := t.TempDir()
	if err := WriteVerbsTree(dir, "10.244.2.7"); err != nil {
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
