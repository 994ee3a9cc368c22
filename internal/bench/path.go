package bench

// Path groups: ratios are taken within a group, against its baseline.
const (
	SameHost  = "same host"
	CrossHost = "cross host"
)

// Path roles.
const (
	RoleBaseline  = "baseline"  // the overlay every other path in its group is compared to
	RoleReference = "reference" // host networking: what no container network can beat
	RoleCandidate = "candidate" // a path meant to beat the baseline (FreeFlow, later)
)

// Placement says where one end of a path runs: in a host's network
// namespace, or in a bench container on that host.
type Placement struct {
	Host      string // h1, h2, ...
	Container bool
	// FreeFlow runs the container with the FreeFlow library; baseline
	// containers run with --no-freeflow, so they stay on the overlay
	// whatever the library can do.
	FreeFlow bool
}

// Path is one way for a client to reach a server. Adding a path is adding
// an entry to Paths.
type Path struct {
	Name   string
	Group  string
	Role   string
	Server Placement
	Client Placement
	// Loopback makes the client dial 127.0.0.1 (server and client share a
	// namespace); otherwise it dials the server placement's own address.
	Loopback bool
	About    string
	// Expect is the path `freeflow conns` must show for the connections a
	// FreeFlow path's clients make (unix, host-tcp); a row whose
	// connections took another path is marked suspect, never assumed.
	Expect string
}

// Paths are the paths the bench knows, in the order they are run and shown.
var Paths = []Path{
	{Name: "host", Group: SameHost, Role: RoleReference, Loopback: true,
		Server: Placement{Host: "h1"}, Client: Placement{Host: "h1"},
		About: "loopback inside one host namespace (host networking)"},
	{Name: "bridge", Group: SameHost, Role: RoleBaseline,
		Server: Placement{Host: "h1", Container: true}, Client: Placement{Host: "h1", Container: true},
		About: "two containers on one host, veth -> bridge -> veth"},
	{Name: "vxlan", Group: CrossHost, Role: RoleBaseline,
		Server: Placement{Host: "h2", Container: true}, Client: Placement{Host: "h1", Container: true},
		About: "containers on two hosts, bridge -> VXLAN -> fabric -> VXLAN -> bridge"},
	{Name: "hostnet", Group: CrossHost, Role: RoleReference,
		Server: Placement{Host: "h2"}, Client: Placement{Host: "h1"},
		About: "host namespace to host namespace over the fabric (host networking)"},
	{Name: "freeflow", Group: SameHost, Role: RoleCandidate, Expect: "unix",
		Server: Placement{Host: "h1", Container: true, FreeFlow: true}, Client: Placement{Host: "h1", Container: true, FreeFlow: true},
		About: "two FreeFlow containers on one host: the library swaps the overlay connection for a Unix socket"},
	{Name: "freeflow-x", Group: CrossHost, Role: RoleCandidate, Expect: "host-tcp",
		Server: Placement{Host: "h2", Container: true, FreeFlow: true}, Client: Placement{Host: "h1", Container: true, FreeFlow: true},
		About: "FreeFlow containers on two hosts: the library swaps the overlay connection for a host-network TCP connection"},
}

// SelectPaths returns the named paths in table order; empty names means all.
func SelectPaths(names []string) ([]Path, error) {
	return selectNamed(Paths, names, func(p Path) string { return p.Name }, "path")
}
