package bench

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/freeflow-net/freeflow/internal/container"
	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/state"
)

// endpoint is one end of a path: a placement in the server or client role.
type endpoint struct {
	Placement
	Server bool
}

// site is where an endpoint runs: a bench container, or a host namespace
// (which serves as both client and server site of its host).
type site struct {
	Label     string // "container NAME" or "namespace NAME", for the report
	Container string // container name; "" for a host namespace
	NSPath    string // its network namespace
	IP        string // address the server listens on (not loopback)
}

// Deployment is the bench's footprint in a cluster: an idle client
// container and a server container on each host that needs them, and
// server processes in the host namespaces that host paths use.
type Deployment struct {
	cli      CLI
	cluster  *state.Cluster
	prefix   string     // container name prefix, unique per run
	pin      pinning    // CPU pinning of clients and servers
	servers  [][]string // server programs, run in every server site
	sites    map[endpoint]*site
	hostSrvs []*exec.Cmd // server process groups in host namespaces
	made     []string    // containers created, for teardown
}

// tenant is the tenant of every bench container: all of them trust each
// other, so fast paths (when they exist) are allowed between them.
const tenant = "bench"

// Deploy starts what paths need. On error it removes what it made.
func Deploy(ctx context.Context, cli CLI, cluster *state.Cluster, prefix string, pin pinning, servers [][]string, paths []Path) (d *Deployment, err error) {
	d = &Deployment{cli: cli, cluster: cluster, prefix: prefix, pin: pin, servers: servers, sites: map[endpoint]*site{}}
	defer func() {
		if err != nil {
			d.Teardown()
		}
	}()
	for _, p := range paths {
		for _, e := range []endpoint{{p.Server, true}, {p.Client, false}} {
			if err := d.plan(e); err != nil {
				return nil, fmt.Errorf("path %s: %w", p.Name, err)
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
	d.sites[e] = &site{Label: "container " + name, Container: name}
	return nil
}

// serverScript runs every server in the background, pinned, and waits.
func (d *Deployment) serverScript() string {
	var b strings.Builder
	for _, s := range d.servers {
		fmt.Fprintf(&b, "%s >/dev/null 2>&1 & ", commandLine(d.pin.server(s)))
	}
	b.WriteString("wait")
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
			argv = []string{"sh", "-c", d.serverScript()}
		}
		d.made = append(d.made, s.Container)
		if err := d.cli.RunDetached(ctx, e.Host, s.Container, tenant, e.FreeFlow, argv); err != nil {
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
// a server site, in their own process group so Teardown can kill them all.
func (d *Deployment) startHostServers() error {
	for _, e := range d.endpoints() {
		s := d.sites[e]
		if !e.Server || s.Container != "" {
			continue
		}
		cmd := netns.Command(s.NSPath, "sh", "-c", d.serverScript())
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
	ports := serverPorts(d.servers)
	for _, e := range d.endpoints() {
		if !e.Server {
			continue
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
		if a.Host != b.Host {
			return a.Host < b.Host
		}
		if a.Container != b.Container {
			return !a.Container
		}
		if a.FreeFlow != b.FreeFlow {
			return !a.FreeFlow
		}
		return a.Server && !b.Server
	})
	return out
}

// Target is the address the client of p dials.
func (d *Deployment) Target(p Path) string {
	if p.Loopback {
		return "127.0.0.1"
	}
	return d.sites[endpoint{p.Server, true}].IP
}

// ClientCmd returns the command that runs argv, pinned, at the client end
// of p.
func (d *Deployment) ClientCmd(p Path, argv []string) *exec.Cmd {
	s := d.sites[endpoint{p.Client, false}]
	argv = d.pin.client(argv)
	if s.Container != "" {
		return d.cli.Exec(s.Container, argv)
	}
	return netns.Command(s.NSPath, argv[0], argv[1:]...)
}

// Describe names the sites of p for the report.
func (d *Deployment) Describe(p Path) PathInfo {
	return PathInfo{Name: p.Name, Group: p.Group, Role: p.Role, About: p.About, Target: d.Target(p),
		Server: d.sites[endpoint{p.Server, true}].Label, Client: d.sites[endpoint{p.Client, false}].Label}
}

// NetNSPaths returns every endpoint's network namespace, by site label.
func (d *Deployment) NetNSPaths() map[string]string {
	out := map[string]string{}
	for _, s := range d.sites {
		out[s.Label] = s.NSPath
	}
	return out
}

// Teardown stops the host-namespace servers and removes the containers.
// It uses its own deadline: it also runs after the run's context ended.
func (d *Deployment) Teardown() []error {
	var errs []error
	for _, cmd := range d.hostSrvs {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	}
	d.hostSrvs = nil
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, name := range d.made {
		if err := d.cli.Remove(ctx, name); err != nil {
			errs = append(errs, fmt.Errorf("remove bench container %s: %w", name, err))
		}
	}
	d.made = nil
	return errs
}
