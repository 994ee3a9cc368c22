package verbsid

import (
	"strings"
	"testing"
)

func TestIdentity(t *testing.T) {
	lid, guid, gid, err := Identity("10.244.1.2")
	if err != nil || lid != 0x0102 || guid != 0x02ffff000af40102 || gid.String() != "10.244.1.2" || len(gid) != 16 {
		t.Fatalf("10.244.1.2: lid %#x guid %#x gid %v err %v", lid, guid, gid, err)
	}
	// No unicast LID: 0, and 0xc000 and above (multicast, permissive).
	for _, ip := range []string{"10.244.0.0", "10.244.192.1", "10.244.255.255", "fd00::1", "nonsense"} {
		if _, _, _, err := Identity(ip); err == nil || !strings.Contains(err.Error(), "--no-rdma") {
			t.Errorf("%s: err %v, want one that names --no-rdma", ip, err)
		}
	}
}
