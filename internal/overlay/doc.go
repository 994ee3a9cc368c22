// Package overlay builds a cluster's network inside its own namespaces: the
// fabric (a bridge in a dedicated namespace that every host is wired to) and
// the baseline container overlay between hosts.
//
// Design. The overlay is Flannel's L3 VXLAN backend done with static state,
// because the host set is fixed when the cluster comes up:
//
//   - host i owns 10.244.i.0/24; its container bridge ffbr0 holds the gateway
//     10.244.i.1/24 (MTU 1450) and its VXLAN device ffvx0 holds 10.244.i.0/32;
//   - for every other host j there is a route 10.244.j.0/24 via 10.244.j.0
//     onlink over ffvx0, a permanent ARP entry 10.244.j.0 -> j's VTEP MAC, and
//     an FDB entry VTEP MAC -> j's fabric address, so nothing is learned or
//     flooded at run time;
//   - forwarding is enabled per host namespace, so a frame from a container
//     crosses bridge -> host routing -> ffvx0 -> fabric -> ffvx0 -> bridge.
//
// Container MTU is 1450 (1500 minus VXLAN's 50 bytes of headers), so a full
// container frame fits in a fabric frame instead of being dropped silently.
//
// Every interface is created inside a cluster namespace (`ip -n`, and the
// veth peer is placed with `peer ... netns`), so nothing ever appears in, or
// is routed to, the machine's root namespace; no namespace has a default
// route.
package overlay
