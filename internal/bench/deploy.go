package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/freeflow-net/freeflow/internal/container"
	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/state"
)

// endpoint is one end of a path: a placement in the server or client role,
// for one of the path's concurrent pairs (always 0 on a host namespace).
type endpoint struct {
	Placement
	Server bool
	Pair   int
}

// site is where an endpoint runs: a bench container, or a host namespace
// (which serves as both client and server site of its host).
type site struct {
	Label     string // "container NAME" or "namespace NAME", for the report
	Container string // container name; "" for a host namespace
	NSPath    string // its network namespace
	IP        string // address the server listens on (not loopback)
	Dir       string // the servers' $D; a host site's is made and removed here
}

// containerDir is $D in a container: its /tmp is private to it.
const containerDir = "/tmp/ffbench"

// Deployment is the bench's footprint in a cluster: an idle client
// container and a server container on each host that needs them (one per
// concurrent pair), and server processes in the host namespaces that host
// paths use.
type Deployment struct {
	cli      CLI
	cluster  *state.Cluster
	prefix   string   // container name prefix, unique per run
	pin      pinning  // CPU pinning of clients and servers
	servers  []Server // run in every pair-0 server site
	scaled   []Server // run in the server sites of further pairs
	volumes  []string // host directories every container mounts at the same path
	sites    map[endpoint]*site
	hostSrvs []*exec.Cmd // server process groups in host namespaces
	made     []string    // containers created, for teardown
	dirs     []string    // host directories made for $D, for teardown
}

// tenant is the tenant of every bench container: all of them trust each
// other, so fast paths are allowed between them.
const tenant = "bench"

// Plan is what a run deploys: the paths with their number of concurrent
// pairs, and the servers of the selected experiments.
type Plan struct {
	Paths   []Path
	Pairs   map[string]int // path name -> pairs (1 when absent)
	Servers []Server       // every server, in every pair-0 server site
	Scaled  []Server       // servers the pairs beyond the first need
	Volumes []string       // host directories mounted in every container at the same path
}

// Deploy starts what the plan needs. On error it removes what it made.
func Deploy(ctx context.Context, cli CLI, cluster *state.Cluster, prefix string, pin pinning, pl Plan) (d *Deployment, err error) {
	d = &Deployment{cli: cli, cluster: cluster, prefix: prefix, pin: pin, servers: pl.Servers, scaled: pl.Scaled,
		volumes: pl.Volumes, sites: map[endpoint]*site{}}
	defer func() {
		if err != nil {
			d.Teardown()
		}
	}()
	for _, p := range pl.Paths {
		for pair := range max(1, pl.Pairs[p.Name]) {
			for _, e := range []endpoint{{p.Server, true, pair}, {p.Client, false, pair}} {
				if err := d.plan(e); err != nil {
					return nil, fmt.Errorf("path %s: %w", p.Name, err)
				}
			}
		}
	}
	if err := d.startContainers(ctx); err != nil {
		return nil, err
	}
	if err := d.startHostServers(); err != nil {
		return nil, err
	}
	return d, d.waitServers(ctx)
}

// plan decides the site of e without starting anything yet.
func (d *Deployment) plan(e endpoint) error {
	if !e.Container {
		e.Pair = 0 // a host namespace serves every pair
	}
	if _, ok := d.sites[e]; ok {
		return nil
	}
	h, err := d.cluster.Host(e.Host)
	if err != nil {
		return err
	}
	if !e.Container {
		ns := state.NewLayout(d.cluster.Name).HostNetNS(h.Name)
		d.sites[e] = &site{Label: "namespace " + ns, NSPath: netns.Path(ns), IP: h.FabricIP}
		return nil
	}
	role := "cli"
	if e.Server {
		role = "srv"
	}
	name := fmt.Sprintf("%s-%s-%s", d.prefix, role, h.Name)
	if e.FreeFlow {
		name += "-ff"
	}
	if e.NoShm {
		name += "-noshm"
	}
	if e.Pair > 0 {
		name += fmt.Sprintf("-p%d", e.Pair)
	}
	d.sites[e] = &site{Label: "container " + name, Container: name, Dir: containerDir}
	return nil
}

// site returns the site of one end of p for pair; a host namespace serves
// every pair.
func (d *Deployment) site(pl Placement, server bool, pair int) *site {
	if !pl.Container {
		pair = 0
	}
	return d.sites[endpoint{pl, server, pair}]
}

// serversOf are the servers a server site runs.
func (d *Deployment) serversOf(e endpoint) []Server {
	if e.Pair > 0 {
		return d.scaled
	}
	return d.servers
}

// serverScript runs every server in the background, pinned, each logging
// to $D, and waits. A site with no server of the experiments run (mpi's:
// its ranks come by rsh) waits too, or its container would end at once.
func (d *Deployment) serverScript(dir string, servers []Server) string {
	var b strings.Builder
	fmt.Fprintf(&b, "export D=%s; mkdir -p \"$D\"; ", commandLine([]string{dir}))
	for _, s := range servers {
		fmt.Fprintf(&b, "%s >\"$D/server-%d.log\" 2>&1 & ", commandLine(d.pin.server([]string{"sh", "-c", s.Shell})), s.Port)
	}
	if len(servers) == 0 {
		b.WriteString("exec sleep infinity")
	} else {
		b.WriteString("wait")
	}
	return b.String()
}

// startContainers starts the bench containers in a fixed order and learns
// their addresses and network namespaces from `freeflow ps`.
func (d *Deployment) startContainers(ctx context.Context) error {
	for _, e := range d.endpoints() {
		s := d.sites[e]
		if s.Container == "" {
			continue
		}
		argv := []string{"sleep", "infinity"}
		if e.Server {
			argv = []string{"sh", "-c", d.serverScript(s.Dir, d.serversOf(e))}
		}
		d.made = append(d.made, s.Container)
		opts := runOpts{FreeFlow: e.FreeFlow, NoShm: e.NoShm, Volumes: d.volumes}
		if err := d.cli.RunDetached(ctx, e.Host, s.Container, tenant, opts, argv); err != nil {
			return fmt.Errorf("start bench container %s on %s: %w", s.Container, e.Host, err)
		}
	}
	ps, err := d.cli.PS(ctx)
	if err != nil {
		return err
	}
	byName := map[string]container.Info{}
	for _, c := range ps {
		byName[c.Name] = c
	}
	for _, s := range d.sites {
		if s.Container == "" {
			continue
		}
		c, ok := byName[s.Container]
		if !ok || c.PID == 0 || c.IP == "" {
			return fmt.Errorf("bench container %s is not running (freeflow ps: %+v)", s.Container, c)
		}
		s.IP, s.NSPath = c.IP, fmt.Sprintf("/proc/%d/ns/net", c.PID)
	}
	return nil
}

// startHostServers starts the servers once in each host namespace that is
// a server site, in their own process group so Teardown can stop them all,
// with $D a fresh directory on the host.
func (d *Deployment) startHostServers() error {
	for _, e := range d.endpoints() {
		s := d.sites[e]
		if !e.Server || s.Container != "" {
			continue
		}
		dir, err := os.MkdirTemp("", "ffbench-"+d.prefix+"-")
		if err != nil {
			return fmt.Errorf("make the servers' directory for %s: %w", s.Label, err)
		}
		d.dirs = append(d.dirs, dir)
		// Servers that drop root (PostgreSQL) make their own subdirectory
		// and must be able to reach it.
		if err := os.Chmod(dir, 0o711); err != nil {
			return fmt.Errorf("open the servers' directory for %s: %w", s.Label, err)
		}
		s.Dir = dir
		cmd := netns.Command(s.NSPath, "sh", "-c", d.serverScript(dir, d.serversOf(e)))
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start bench servers in %s: %w", s.Label, err)
		}
		d.hostSrvs = append(d.hostSrvs, cmd)
	}
	return nil
}

// waitServers waits until every server listens in every server site.
func (d *Deployment) waitServers(ctx context.Context) error {
	for _, e := range d.endpoints() {
		if !e.Server {
			continue
		}
		var ports []int
		for _, s := range d.serversOf(e) {
			ports = append(ports, s.Port)
		}
		if err := waitListening(ctx, d.sites[e], ports); err != nil {
			return err
		}
	}
	return nil
}

// endpoints lists the planned endpoints in a stable order.
func (d *Deployment) endpoints() []endpoint {
	out := make([]endpoint, 0, len(d.sites))
	for e := range d.sites {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		switch {
		case a.Host != b.Host:
			return a.Host < b.Host
		case a.Container != b.Container:
			return !a.Container
		case a.FreeFlow != b.FreeFlow:
			return !a.FreeFlow
		case a.Pair != b.Pair:
			return a.Pair < b.Pair
		}
		return a.Server && !b.Server
	})
	return out
}

// Target is the address the client of p's pair dials.
func (d *Deployment) Target(p Path, pair int) string {
	if p.Loopback {
		return "127.0.0.1"
	}
	return d.site(p.Server, true, pair).IP
}

// Dial is how the client of p's pair reaches its server.
func (d *Deployment) Dial(p Path, pair int) dial {
	cli, srv := d.Containers(p, pair)
	switch p.Transport {
	case TransportUnix:
		return dial{Addr: ffmemSocket(d.site(p.Server, true, pair).Dir), Transport: p.Transport}
	case TransportMemory:
		return dial{Transport: p.Transport}
	case TransportMPIShm:
		return dial{Transport: p.Transport, Hosts: []string{cli}}
	}
	return dial{Addr: d.Target(p, pair), Transport: p.Transport, Hosts: []string{cli, srv}}
}

// ClientCmd returns the command that runs argv, pinned, at the client end
// of p's pair, for at most limit. In a container the client is killed
// there when its time is up: killing `freeflow exec` outside would leave
// it running.
func (d *Deployment) ClientCmd(p Path, pair int, argv []string, limit time.Duration) *exec.Cmd {
	s := d.site(p.Client, false, pair)
	argv = d.pin.client(argv)
	if s.Container != "" {
		secs := strconv.Itoa(int(limit.Round(time.Second) / time.Second))
		return d.cli.Exec(s.Container, append([]string{"timeout", "-s", "KILL", secs}, argv...))
	}
	return netns.Command(s.NSPath, argv[0], argv[1:]...)
}

// LauncherCmd returns the command that runs argv, unpinned, in the host
// namespace of p's client host (mpirun, outside the containers it
// starts ranks in).
func (d *Deployment) LauncherCmd(p Path, argv []string) *exec.Cmd {
	ns := netns.Path(state.NewLayout(d.cluster.Name).HostNetNS(p.Client.Host))
	return netns.Command(ns, argv[0], argv[1:]...)
}

// Containers names the client and server containers of p's pair ("" for
// a host namespace).
func (d *Deployment) Containers(p Path, pair int) (client, server string) {
	return d.site(p.Client, false, pair).Container, d.site(p.Server, true, pair).Container
}

// Describe names the sites of p for the report.
func (d *Deployment) Describe(p Path) PathInfo {
	info := PathInfo{Name: p.Name, Group: p.Group, Role: p.Role, About: p.About, Expect: p.Expect,
		Server: d.site(p.Server, true, 0).Label, Client: d.site(p.Client, false, 0).Label}
	switch dl := d.Dial(p, 0); p.Transport {
	case TransportMemory:
		info.Server, info.Client, info.Target = "–", "two CPUs of the host", "–"
	case TransportMPIShm:
		info.Server, info.Target = "(both ranks in the client's container)", "shared memory"
	default:
		info.Target = dl.Addr
	}
	return info
}

// NetNSPaths returns every endpoint's network namespace, by site label,
// and every host namespace (where the agents' host-tcp connections live).
func (d *Deployment) NetNSPaths() map[string]string {
	out := map[string]string{}
	for _, h := range d.cluster.Hosts {
		ns := state.NewLayout(d.cluster.Name).HostNetNS(h.Name)
		out["namespace "+ns] = netns.Path(ns)
	}
	for _, s := range d.sites {
		out[s.Label] = s.NSPath
	}
	return out
}

// stopGrace is how long host-namespace servers get to exit on SIGINT
// (PostgreSQL's fast shutdown removes its shared memory) before SIGKILL.
const stopGrace = 3 * time.Second

// Teardown stops the host-namespace servers, removes the containers and
// the host directories. It uses its own deadline: it also runs after the
// run's context ended.
func (d *Deployment) Teardown() []error {
	var errs []error
	for _, cmd := range d.hostSrvs {
		stopGroup(cmd, stopGrace)
	}
	d.hostSrvs = nil
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, name := range d.made {
		if err := d.cli.Remove(ctx, name); err != nil {
			errs = append(errs, fmt.Errorf("remove bench container %s: %w", name, err))
		}
	}
	d.made = nil
	for _, dir := range d.dirs {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("remove the servers' directory: %w", err))
		}
	}
	d.dirs = nil
	return errs
}

// stopGroup interrupts cmd's process group, waits for every member to
// exit (the shell goes first, its servers may take a moment), and kills
// what is left after grace.
func stopGroup(cmd *exec.Cmd, grace time.Duration) {
	pgid := cmd.Process.Pid
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }() // reaps the shell, so it does not count below
	syscall.Kill(-pgid, syscall.SIGINT)
	for end := time.Now().Add(grace); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if syscall.Kill(-pgid, 0) != nil {
			break
		}
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
	<-done
}
