package e2e

import (
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/testenv"
)

var (
	devinfoLID  = regexp.MustCompile(`port_lid:\s+(\d+)`)
	devinfoGUID = regexp.MustCompile(`node_guid:\s+([0-9a-f:]+)`)
	devinfoGID  = regexp.MustCompile(`GID\[\s*0\]:\s+(\S+)`)
)

// TestVerbsDeviceInEveryContainer: Debian's ibv_devinfo, unmodified, finds
// the container's virtual verbs device ffv0 through the stock libibverbs,
// its port active, with a LID, node GUID and GID of its own derived from
// the container's overlay address; --no-rdma and --no-freeflow containers
// have no device.
func TestVerbsDeviceInEveryContainer(t *testing.T) {
	if m := testenv.Missing("ibv_devinfo", "ibv_devices"); m != "" {
		t.Skip(m)
	}
	c := newCluster(t, 1)
	seen := map[string]string{}
	for i := 0; i < 2; i++ {
		name := testenv.RandomName("v", 5)
		c.StartDetached(t, "h1", name, nil, "sleep", "600")
		out := c.MustFF(t, "exec", name, "--", "ibv_devinfo", "-v")
		for _, want := range []string{"hca_id:\tffv0", "state:\t\t\tPORT_ACTIVE (4)", "link_layer:\t\tInfiniBand"} {
			if !strings.Contains(out, want) {
				t.Fatalf("ibv_devinfo in %s lacks %q:\n%s", name, want, out)
			}
		}
		ip := containerIP(t, c, name)
		lid, guid, gid := devinfoLID.FindStringSubmatch(out), devinfoGUID.FindStringSubmatch(out), devinfoGID.FindStringSubmatch(out)
		if lid == nil || guid == nil || gid == nil {
			t.Fatalf("ibv_devinfo -v in %s shows no LID, node GUID or GID 0:\n%s", name, out)
		}
		a := net.ParseIP(ip).To4()
		if want := fmt.Sprint(int(a[2])<<8 | int(a[3])); lid[1] != want {
			t.Errorf("%s (%s): port_lid %s, want %s", name, ip, lid[1], want)
		}
		if want := fmt.Sprintf("02ff:ff00:%02x%02x:%02x%02x", a[0], a[1], a[2], a[3]); guid[1] != want {
			t.Errorf("%s (%s): node_guid %s, want %s", name, ip, guid[1], want)
		}
		if want := fmt.Sprintf("0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", a[0], a[1], a[2], a[3]); gid[1] != want {
			t.Errorf("%s (%s): GID 0 %s, want %s", name, ip, gid[1], want)
		}
		if other, ok := seen[guid[1]]; ok {
			t.Errorf("%s and %s have the same node GUID %s", other, name, guid[1])
		}
		seen[guid[1]] = name
	}
	for _, flag := range []string{"--no-rdma", "--no-freeflow"} {
		// As on a machine without RDMA: libibverbs finds no device class at all.
		r := c.FF(t, "run", "--host", "h1", "--name", testenv.RandomName("n", 5), "--rm", flag, "--", "ibv_devices")
		if r.Code == 0 || strings.Contains(r.Stdout+r.Stderr, "ffv0") {
			t.Errorf("ibv_devices in a %s container: exit %d, want a failure and no ffv0\nstdout: %s\nstderr: %s", flag, r.Code, r.Stdout, r.Stderr)
		}
	}
}
