// Package podroutes keeps, in the node's network namespace, a route to
// every other node's pod CIDR through that node's address, as Flannel's
// host-gw backend does. On Kubernetes, FreeFlow's CNI list puts a node's
// pods on a bridge holding the node's pod CIDR; a connection between pods
// of two nodes is set up over the nodes' network (and stays there
// whenever FreeFlow cannot swap its data path), so every node must route
// the others' pod CIDRs. The nodes must share a layer-2 segment (each
// node's address is a next hop, as with host-gw); where the network
// routes pod CIDRs itself, or another overlay does, freeflowd runs with
// --pod-routes=none. docs/KUBERNETES-DEPLOY.md, "Routes between nodes".
package podroutes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Protocol marks the routes this package makes (a route's rtm_protocol,
// `ip route show proto 70`), so it finds and removes its own and never
// touches another's.
const Protocol = 70

// Route is a pod CIDR and the node address it is reached through.
type Route struct {
	Dst netip.Prefix
	Via netip.Addr
}

func (r Route) String() string { return r.Dst.String() + " via " + r.Via.String() }

// Want returns the routes to every node's pod CIDR but self's, through
// that node's address. A node without both (no pod CIDR assigned yet) has
// none, and so has one whose CIDR could not be a pod CIDR here: the
// default route's /0, one overlapping this node's own pod CIDR, one that
// holds the node's own address (its next hop would be inside it).
func Want(hosts []directory.Host, self string) []Route {
	var own netip.Prefix
	for _, h := range hosts {
		if h.Name == self {
			own, _ = netip.ParsePrefix(h.Subnet)
		}
	}
	var rs []Route
	for _, h := range hosts {
		dst, err1 := netip.ParsePrefix(h.Subnet)
		via, err2 := netip.ParseAddr(h.FabricIP)
		if h.Name == self || err1 != nil || err2 != nil || !dst.Addr().Is4() || !via.Is4() ||
			dst.Bits() == 0 || (own.IsValid() && dst.Overlaps(own)) || dst.Contains(via) {
			continue
		}
		rs = append(rs, Route{Dst: dst.Masked(), Via: via})
	}
	slices.SortFunc(rs, func(a, b Route) int { return a.Dst.Addr().Compare(b.Dst.Addr()) })
	return rs
}

// Open returns a netlink handle in the calling thread's network namespace,
// which it keeps whatever thread later uses it (an agent's threads enter
// pods' namespaces now and then).
func Open() (*netlink.Handle, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("open a netlink socket for the pod routes: %w", err)
	}
	return h, nil
}

// Sync makes h's network namespace hold exactly want among the routes
// marked Protocol (main table, IPv4): each one added or replaced, every
// other one of ours removed. Routes of others are left alone, but one to
// a wanted destination is taken over (replace), as a node's CNI backend
// does.
func Sync(h *netlink.Handle, want []Route) error {
	have, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: Protocol, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("list pod routes: %w", err)
	}
	var errs []error
	for _, r := range have {
		if r.Dst == nil || !slices.ContainsFunc(want, func(w Route) bool { return same(r, w) }) {
			if err := h.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("remove route %v: %w", r.Dst, err))
			}
		}
	}
	for _, w := range want {
		nr := &netlink.Route{Dst: &net.IPNet{IP: w.Dst.Addr().AsSlice(), Mask: net.CIDRMask(w.Dst.Bits(), 32)},
			Gw: w.Via.AsSlice(), Protocol: Protocol, Table: unix.RT_TABLE_MAIN}
		if err := h.RouteReplace(nr); err != nil {
			errs = append(errs, fmt.Errorf("route %s (is %s on a link of this node? --pod-routes=host-gw needs the nodes on one layer-2 segment): %w", w, w.Via, err))
		}
	}
	return errors.Join(errs...)
}

// same reports whether kernel route r is w.
func same(r netlink.Route, w Route) bool {
	ones, _ := r.Dst.Mask.Size()
	dst, ok := netip.AddrFromSlice(r.Dst.IP.To4())
	via, ok2 := netip.AddrFromSlice(r.Gw.To4())
	return ok && ok2 && netip.PrefixFrom(dst, ones) == w.Dst && via == w.Via
}

// Period is how often Keep looks at the nodes; it changes routes only
// when they changed, and puts them back every Resync.
const (
	Period = 2 * time.Second
	Resync = time.Minute
)

// Keep syncs the routes of h's namespace to what hosts returns, until ctx
// ends, from the first time synced says hosts holds every node (before,
// a node not listed yet would lose its route). A failure is logged once
// until the routes sync again.
func Keep(ctx context.Context, h *netlink.Handle, hosts func() []directory.Host, synced func() bool, self string, logf func(string, ...any)) {
	var last []Route
	var lastSync time.Time
	failed := ""
	t := time.NewTicker(Period)
	defer t.Stop()
	for {
		want := Want(hosts(), self)
		if synced() && (!slices.Equal(want, last) || time.Since(lastSync) > Resync) {
			err := Sync(h, want)
			switch {
			case err != nil && err.Error() != failed:
				failed = err.Error()
				logf("pod routes: %v", err)
			case err == nil:
				if failed != "" || !slices.Equal(want, last) {
					logf("pod routes: %d other nodes' pod CIDRs routed through their addresses: %v", len(want), want)
				}
				failed, last, lastSync = "", want, time.Now()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
