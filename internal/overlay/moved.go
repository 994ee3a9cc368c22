package overlay

import (
	"errors"
	"fmt"
	"strings"

	"github.com/freeflow-net/freeflow/internal/state"
)

// A migrated container keeps its address, which stays in its home host's
// subnet (docs/ARCHITECTURE.md, "Control flow: migrating a container").
// The subnet routes stay as they are; one /32 route per moved address on
// every host says where it lives now, and the home bridge answers ARP for
// it (a proxy entry), so containers on the home host, which see the whole
// subnet on their link, reach it through their gateway.

// AttachMoved gives the network namespace ns an interface on host h's
// bridge with address ip and MAC mac, and routes the overlay through h's
// bridge. The address is a /32: the container's link no longer holds its
// home subnet. The host end is named hostVeth.
func AttachMoved(l state.Layout, h state.Host, ns, hostVeth, ip, mac string) error {
	hostNS := l.HostNetNS(h.Name)
	err := steps(hostNS,
		[]string{"link", "add", hostVeth, "mtu", mtu(), "type", "veth", "peer", "name", "eth0", "netns", ns},
		[]string{"link", "set", hostVeth, "master", Bridge, "up"},
	)
	if err == nil {
		err = steps(ns,
			[]string{"link", "set", "lo", "up"},
			[]string{"link", "set", "eth0", "address", mac, "mtu", mtu(), "up"},
			[]string{"addr", "add", ip + "/32", "dev", "eth0"},
			[]string{"route", "add", h.Gateway, "dev", "eth0", "scope", "link"},
			[]string{"route", "add", state.OverlayCIDR, "via", h.Gateway, "dev", "eth0"},
		)
	}
	if err != nil {
		return fmt.Errorf("attach %s to %s's bridge as %s: %w", ns, h.Name, ip, err)
	}
	return nil
}

// PlaceAddress routes ip, an address of home's subnet, to the container
// that now lives on host at, on every host of hosts; with at == home it
// takes the moved routes away again. Each step replaces or deletes, so it
// may be repeated.
func PlaceAddress(l state.Layout, hosts []state.Host, ip string, home, at state.Host) error {
	if at.Name == home.Name {
		return UnplaceAddress(l, hosts, ip, home)
	}
	var errs []error
	for _, h := range hosts {
		ns := l.HostNetNS(h.Name)
		var err error
		switch h.Name {
		case at.Name:
			err = ipIn(ns, "route", "replace", ip+"/32", "dev", Bridge)
		case home.Name:
			err = steps(ns,
				[]string{"route", "replace", ip + "/32", "via", VTEPAddr(at), "dev", VXLANDevice, "onlink"},
				[]string{"neigh", "replace", "proxy", ip, "dev", Bridge},
			)
		default:
			err = ipIn(ns, "route", "replace", ip+"/32", "via", VTEPAddr(at), "dev", VXLANDevice, "onlink")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("route %s to %s on %s: %w", ip, at.Name, h.Name, err))
		}
	}
	return errors.Join(errs...)
}

// UnplaceAddress removes what PlaceAddress added for ip on every host; a
// host that no longer has them is not an error.
func UnplaceAddress(l state.Layout, hosts []state.Host, ip string, home state.Host) error {
	var errs []error
	for _, h := range hosts {
		ns := l.HostNetNS(h.Name)
		if err := deleteIfThere(ns, "route", ip+"/32"); err != nil {
			errs = append(errs, fmt.Errorf("remove the route of %s on %s: %w", ip, h.Name, err))
		}
		if h.Name == home.Name {
			if err := deleteIfThere(ns, "neigh", "proxy", ip, "dev", Bridge); err != nil {
				errs = append(errs, fmt.Errorf("remove the proxy ARP entry of %s on %s: %w", ip, h.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// deleteIfThere runs `ip -n ns OBJ del ARGS...`, accepting that it is gone.
func deleteIfThere(ns, obj string, args ...string) error {
	err := ipIn(ns, append([]string{obj, "del"}, args...)...)
	if err == nil {
		return nil
	}
	for _, gone := range []string{"No such process", "No such file", "Cannot find device"} {
		if strings.Contains(err.Error(), gone) {
			return nil
		}
	}
	return err
}
