package bench

// Path groups: ratios are taken within a group, against its baseline.
const (
	SameHost  = "same host"
	CrossHost = "cross host"
	// OneMachine holds the physical limits: no network, two CPUs and
	// their memory.
	OneMachine = "machine"
)

// Path roles.
const (
	RoleBaseline  = "baseline"  // the overlay every other path in its group is compared to
	RoleReference = "reference" // what no container network can beat: host networking, a Unix socket, the hardware
	RoleCandidate = "candidate" // a path meant to beat the baseline (FreeFlow)
	RoleMeasured  = "measured"  // figures of their own, compared with no other path (a migration's)
)

// Transports: what carries a path's bytes. Each experiment says which it
// can measure (a TCP tool cannot use a Unix socket).
const (
	TransportTCP    = ""        // TCP over the network the placements give
	TransportUnix   = "unix"    // an AF_UNIX stream socket in one namespace
	TransportMemory = "memory"  // no socket: the machine's own limits
	TransportMPIShm = "mpi-shm" // two Open MPI ranks in one container, on Open MPI's shared memory
	TransportVerbs  = "verbs"   // the containers' virtual RDMA devices (docs/VERBS.md)
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
	// NoShm runs a FreeFlow container with --no-shm: its same-host
	// connections stay on the kernel (unix) channel.
	NoShm bool
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
	Loopback  bool
	Transport string
	About     string
	// Expect is the path `freeflow conns` must show for the connections a
	// FreeFlow path's clients make (shm, unix, host-tcp); a row whose
	// connections took another path is marked suspect, never assumed.
	Expect string
}

// Containers on h1 and h2, with and without FreeFlow.
var (
	onH1     = Placement{Host: "h1"}
	onH2     = Placement{Host: "h2"}
	plainH1  = Placement{Host: "h1", Container: true}
	plainH2  = Placement{Host: "h2", Container: true}
	ffH1     = Placement{Host: "h1", Container: true, FreeFlow: true}
	ffH2     = Placement{Host: "h2", Container: true, FreeFlow: true}
	ffNoShm1 = Placement{Host: "h1", Container: true, FreeFlow: true, NoShm: true}
)

// Paths are the paths the bench knows, in the order they are run and shown.
var Paths = []Path{
	{Name: "host", Group: SameHost, Role: RoleReference, Loopback: true, Server: onH1, Client: onH1,
		About: "loopback inside one host namespace (host networking)"},
	{Name: "unix", Group: SameHost, Role: RoleReference, Transport: TransportUnix, Server: onH1, Client: onH1,
		About: "an AF_UNIX stream socket between two processes in one host namespace (ffmem only: no packaged tool here speaks it)"},
	{Name: "bridge", Group: SameHost, Role: RoleBaseline, Server: plainH1, Client: plainH1,
		About: "two containers on one host, veth -> bridge -> veth"},
	{Name: "freeflow", Group: SameHost, Role: RoleCandidate, Expect: "shm", Server: ffH1, Client: ffH1,
		About: "two FreeFlow containers on one host: the library swaps the overlay connection for shared memory"},
	{Name: "freeflow-unix", Group: SameHost, Role: RoleCandidate, Expect: "unix", Server: ffNoShm1, Client: ffNoShm1,
		About: "two FreeFlow containers on one host run with --no-shm: the library swaps the overlay connection for a Unix socket (the kernel channel)"},
	{Name: "freeflow-verbs", Group: SameHost, Role: RoleCandidate, Transport: TransportVerbs, Server: ffH1, Client: ffH1,
		About: "two FreeFlow containers on one host through their virtual RDMA devices (ffv0): verbs programs (perftest), no socket"},
	{Name: "mpi-shm", Group: SameHost, Role: RoleReference, Transport: TransportMPIShm, Server: plainH1, Client: plainH1,
		About: "two Open MPI ranks in one container on Open MPI's own shared memory (btl vader): the HPC reference"},
	{Name: "vxlan", Group: CrossHost, Role: RoleBaseline, Server: plainH2, Client: plainH1,
		About: "containers on two hosts, bridge -> VXLAN -> fabric -> VXLAN -> bridge"},
	{Name: "hostnet", Group: CrossHost, Role: RoleReference, Server: onH2, Client: onH1,
		About: "host namespace to host namespace over the fabric (host networking)"},
	{Name: "freeflow-x", Group: CrossHost, Role: RoleCandidate, Expect: "host-tcp", Server: ffH2, Client: ffH1,
		About: "FreeFlow containers on two hosts: the library swaps the overlay connection for a host-network TCP connection"},
	{Name: "freeflow-verbs-x", Group: CrossHost, Role: RoleCandidate, Transport: TransportVerbs, Server: ffH2, Client: ffH1,
		About: "FreeFlow containers on two hosts through their virtual RDMA devices (ffv0): verbs programs (perftest), their QPs connected over a host-network TCP connection the agents made"},
	{Name: "machine", Group: OneMachine, Role: RoleReference, Transport: TransportMemory, Server: onH1, Client: onH1,
		About: "no network: two CPUs of this machine and their caches and memory (ffmem limits): the physical ceiling"},
}

// SelectPaths returns the named paths in table order; empty names means all.
func SelectPaths(names []string) ([]Path, error) {
	return selectNamed(Paths, names, func(p Path) string { return p.Name }, "path")
}

// containerPath reports whether both ends of p run in containers.
func containerPath(p Path) bool { return p.Server.Container && p.Client.Container }

// noShmPath reports whether p needs `freeflow run --no-shm`.
func noShmPath(p Path) bool { return p.Server.NoShm || p.Client.NoShm }
