// Package verbsid derives a container's verbs device identity from its
// overlay address (docs/VERBS.md): the CLI writes it into the container's
// sysfs tree, the agent reads it back to find the container a VERBS_PEER
// names, so the two can never disagree.
package verbsid

import (
	"fmt"
	"net"
)

// Identity is the device identity of the container at ip: its port's LID
// (the address's last two bytes: unique within the overlay's /16, and a
// unicast LID, 1..0xbfff, while the third byte is below 192), its node GUID
// (a locally administered EUI-64 holding the address) and its GID (the
// IPv4-mapped address, as RoCE gives an IPv4 port).
func Identity(ip string) (lid uint16, guid uint64, gid net.IP, err error) {
	a := net.ParseIP(ip).To4()
	if a == nil {
		return 0, 0, nil, fmt.Errorf("container address %q is not IPv4: no LID for its verbs device; run it with --no-rdma", ip)
	}
	lid = uint16(a[2])<<8 | uint16(a[3])
	if lid == 0 || lid >= 0xc000 {
		return 0, 0, nil, fmt.Errorf("container address %s gives no unicast LID (0x%x) for its verbs device; run it with --no-rdma", ip, lid)
	}
	guid = 0x02ffff0000000000 | uint64(a[0])<<24 | uint64(a[1])<<16 | uint64(a[2])<<8 | uint64(a[3])
	return lid, guid, a.To16(), nil
}
