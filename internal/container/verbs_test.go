package container

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestVerbsIdentity(t *testing.T) {
	lid, guid, gid, err := verbsIdentity("10.244.1.2")
	if err != nil || lid != 0x0102 || guid != 0x02ffff000af40102 || gid.String() != "10.244.1.2" || len(gid) != 16 {
		t.Fatalf("10.244.1.2: lid %#x guid %#x gid %v err %v", lid, guid, gid, err)
	}
	// No unicast LID: 0, and 0xc000 and above (multicast, permissive).
	for _, ip := range []string{"10.244.0.0", "10.244.192.1", "10.244.255.255", "fd00::1", "nonsense"} {
		if _, _, _, err := verbsIdentity(ip); err == nil || !strings.Contains(err.Error(), "--no-rdma") {
			t.Errorf("%s: err %v, want one that names --no-rdma", ip, err)
		}
	}
}

func TestWriteVerbsTree(t *testing.T) {
	dir := t.TempDir()
	if err := writeVerbsTree(dir, "10.244.2.7"); err != nil {
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
	} {
		b, err := os.ReadFile(filepath.Join(dir, "sys", name))
		if err != nil || string(b) != want+"\n" {
			t.Errorf("%s: %q (%v), want %q", name, b, err, want)
		}
	}
}
