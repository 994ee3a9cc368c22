// Command freeflowd is the FreeFlow agent of one host. The CLI starts it
// inside the host's network namespace (nsenter --net=/run/netns/<cluster>-<host>)
// with etcd as its datastore; on Kubernetes a DaemonSet runs it with
// --datastore kubernetes (internal/directory/kube). It serves the library
// and admin sockets until SIGTERM or SIGINT, then removes them.
// `freeflowd install` puts FreeFlow on a Kubernetes node
// (internal/nodeinstall; the DaemonSet's init container runs it), and
// `freeflowd conns` lists what the node's agent knows (conns.go).
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/freeflow-net/freeflow/internal/agent"
	"github.com/freeflow-net/freeflow/internal/directory/etcd"
	"github.com/freeflow-net/freeflow/internal/directory/kube"
	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/nodeinstall"
	"github.com/freeflow-net/freeflow/internal/podroutes"
	"github.com/freeflow-net/freeflow/internal/state"
	"k8s.io/klog/v2"
)

type options struct {
	agent     agent.Config
	datastore string // etcd or kubernetes
	etcd      []string
	etcdNetNS string // dial etcd from this network namespace ("" = our own)
	kube      kubeOptions
	podRoutes string // none or host-gw (podroutes)
	logFile   string
}

// kubeOptions are the flags of --datastore kubernetes.
type kubeOptions struct {
	kubeconfig string // "" = in-cluster
	node       string
	namespace  string
}

const (
	datastoreEtcd = "etcd"
	datastoreKube = "kubernetes"
)

// --pod-routes values.
const (
	podRoutesNone   = "none"
	podRoutesHostGW = "host-gw"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "install" {
		if err := nodeinstall.Main(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "freeflowd install:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "conns" {
		os.Exit(connsMain(os.Args[2:]))
	}
	opts, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "freeflowd:", err)
		os.Exit(2)
	}
	if err := run(opts); err != nil {
		fmt.Fprintln(os.Stderr, "freeflowd:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	var etcd string
	fs := flag.NewFlagSet("freeflowd", flag.ContinueOnError)
	fs.StringVar(&o.agent.Cluster, "cluster", state.DefaultCluster, "cluster `name`")
	fs.StringVar(&o.agent.Host, "host", "", "this host's `name` (required with --datastore etcd; the node's name with kubernetes)")
	fs.StringVar(&o.agent.FabricIP, "fabric-ip", "", "this host's fabric `IP` (required with --datastore etcd; default with kubernetes: the node's InternalIP)")
	fs.StringVar(&o.agent.Subnet, "subnet", "", "this host's container subnet, `CIDR` (required with --datastore etcd; default with kubernetes: the node's spec.podCIDR)")
	fs.StringVar(&o.datastore, "datastore", datastoreEtcd, "where the cluster directory lives: `etcd` or kubernetes (pods, nodes, a secret and a configmap)")
	fs.StringVar(&etcd, "etcd", "", "etcd client `URL[,URL...]` (required with --datastore etcd)")
	fs.StringVar(&o.kube.kubeconfig, "kubeconfig", "", "kubeconfig `path` (--datastore kubernetes; default: the pod's in-cluster config)")
	fs.StringVar(&o.kube.node, "node", os.Getenv("NODE_NAME"), "this agent's Kubernetes node `name` (--datastore kubernetes; default $NODE_NAME)")
	fs.StringVar(&o.kube.namespace, "namespace", kube.DefaultNamespace, "`namespace` of FreeFlow's own secret and configmap (--datastore kubernetes)")
	fs.StringVar(&o.agent.SockDir, "sock-dir", "", "library socket `dir`ectory (default: the cluster layout's)")
	fs.StringVar(&o.agent.AdminSocket, "admin-socket", "", "admin socket `path` (default: the cluster layout's)")
	fs.IntVar(&o.agent.SessionsPerContainer, "sessions-per-container", agent.DefaultSessionsPerContainer,
		"most library-socket `sessions` one container may hold at once (the library opens one per thread); one more is told LIMIT and takes the overlay")
	fs.IntVar(&o.agent.AdminConns, "admin-conns", agent.DefaultAdminConns, "most admin-socket `connections` at once (CLI, CNI plugin)")
	fs.StringVar(&o.podRoutes, "pod-routes", podRoutesNone, "`none`, or host-gw: route every other node's pod CIDR through its address "+
		"(--datastore kubernetes; the nodes on one layer-2 segment, as Flannel's host-gw; none where the network or another overlay routes them)")
	fs.StringVar(&o.etcdNetNS, "etcd-netns", "", "dial etcd from the network namespace at `path` (default: the agent's own)")
	fs.StringVar(&o.logFile, "log", "", "log `file` (default stderr)")
	fs.BoolVar(&o.agent.FabricGuard, "fabric-guard", true,
		"install, in this network namespace, the nftables rules (table inet freeflow-agent) that keep fabric sockets handed to containers from connecting anywhere else "+
			"(if that fails, cross-host connections take the overlay); false installs none and hands them unguarded")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q; freeflowd takes only flags", fs.Arg(0))
	}
	switch o.datastore {
	case datastoreEtcd:
		if etcd == "" {
			return o, errors.New("--etcd is required: the etcd client URL(s) of the cluster directory, e.g. http://10.99.0.1:2379")
		}
		o.etcd = strings.Split(etcd, ",")
	case datastoreKube:
		if err := o.checkKube(); err != nil {
			return o, err
		}
	default:
		return o, fmt.Errorf("--datastore %q: want etcd or kubernetes", o.datastore)
	}
	switch {
	case o.podRoutes != podRoutesNone && o.podRoutes != podRoutesHostGW:
		return o, fmt.Errorf("--pod-routes %q: want none or host-gw", o.podRoutes)
	case o.podRoutes == podRoutesHostGW && o.datastore != datastoreKube:
		return o, errors.New("--pod-routes host-gw is for --datastore kubernetes (a CLI cluster's hosts are routed by its overlay)")
	}
	return o, o.check()
}

// checkKube checks the flags of --datastore kubernetes: the host is the
// node, and its fabric IP and subnet may come from the Node (run).
func (o *options) checkKube() error {
	k := &o.kube
	if k.node == "" {
		return errors.New("--node is required with --datastore kubernetes (or NODE_NAME, which a DaemonSet sets from spec.nodeName)")
	}
	if o.agent.Host != "" && o.agent.Host != k.node {
		return fmt.Errorf("--host %q differs from --node %q; with --datastore kubernetes the host is the node", o.agent.Host, k.node)
	}
	o.agent.Host = k.node
	if k.namespace == "" {
		return errors.New("--namespace is empty; FreeFlow's secret and configmap live in one (default " + kube.DefaultNamespace + ")")
	}
	return nil
}

func (o *options) check() error {
	a := &o.agent
	if err := state.ValidClusterName(a.Cluster); err != nil {
		return err
	}
	if a.Host == "" {
		return errors.New("--host is required: the name of the host this agent serves, e.g. h1")
	}
	fromNode := o.datastore == datastoreKube
	if _, err := netip.ParseAddr(a.FabricIP); err != nil && !(fromNode && a.FabricIP == "") {
		return fmt.Errorf("--fabric-ip %q is not an IP address: %w", a.FabricIP, err)
	}
	if _, err := netip.ParsePrefix(a.Subnet); err != nil && !(fromNode && a.Subnet == "") {
		return fmt.Errorf("--subnet %q is not a CIDR such as 10.244.1.0/24: %w", a.Subnet, err)
	}
	for _, e := range o.etcd {
		if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--etcd %q is not an etcd client URL such as http://10.99.0.1:2379", e)
		}
	}
	if o.etcdNetNS != "" {
		if _, err := os.Stat(o.etcdNetNS); err != nil {
			return fmt.Errorf("--etcd-netns: %w (it names the network namespace to dial etcd from)", err)
		}
	}
	layout := state.NewLayout(a.Cluster)
	if a.SockDir == "" {
		a.SockDir = layout.AgentSockDir(a.Host)
	}
	if a.AdminSocket == "" {
		a.AdminSocket = layout.AdminSocket(a.Host)
	}
	return nil
}

func run(o options) error {
	logOut := io.Writer(os.Stderr)
	if o.logFile != "" {
		f, err := os.OpenFile(o.logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("open log file: %w", err)
		}
		defer f.Close()
		logOut = f
	}
	logger := slog.New(slog.NewTextHandler(logOut, nil)).With("host", o.agent.Host)
	klog.SetSlogLogger(logger) // client-go's own messages (retries, watch restarts) go to the same log
	o.agent.Logger = logger
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logf := func(format string, a ...any) { logger.Info(fmt.Sprintf(format, a...)) }
	dir, err := openDirectory(ctx, &o, logf)
	if err != nil {
		return err
	}
	defer dir.Close()
	if o.podRoutes == podRoutesHostGW {
		nodes, ok := dir.(interface{ HostsSynced() bool }) // the Kubernetes directory (parseFlags)
		if !ok {
			return errors.New("--pod-routes host-gw needs --datastore kubernetes")
		}
		// Opened here, on the main thread, in the node's namespace.
		h, err := podroutes.Open()
		if err != nil {
			return err
		}
		routesCtx, stopRoutes := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			podroutes.Keep(routesCtx, h, dir.Hosts, nodes.HostsSynced, o.agent.Host, logf)
		}()
		defer func() { stopRoutes(); <-done; h.Close() }()
	}
	a, err := agent.New(o.agent, dir)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// datastore is the directory the agent runs on, closed when it stops.
type datastore interface {
	agent.Directory
	Close() error
}

// openDirectory opens the datastore o names. On Kubernetes it fills in the
// fabric IP and subnet left unset from the Node, waiting for the Node to
// have them.
func openDirectory(ctx context.Context, o *options, logf func(string, ...any)) (datastore, error) {
	if o.datastore == datastoreEtcd {
		return etcd.New(ctx, etcd.Config{Cluster: o.agent.Cluster, Endpoints: o.etcd, Dialer: etcdDialer(o.etcdNetNS), Logf: logf})
	}
	client, err := kube.NewClient(o.kube.kubeconfig)
	if err != nil {
		return nil, err
	}
	dir, err := kube.New(ctx, kube.Config{Client: client, Node: o.kube.node, Namespace: o.kube.namespace, Logf: logf})
	if err != nil {
		return nil, err
	}
	if o.agent.FabricIP == "" || o.agent.Subnet == "" {
		h, err := dir.Node(ctx, o.agent.Subnet == "")
		if err != nil {
			dir.Close()
			return nil, err
		}
		o.agent.FabricIP = cmp.Or(o.agent.FabricIP, h.FabricIP)
		o.agent.Subnet = cmp.Or(o.agent.Subnet, h.Subnet)
	}
	return dir, nil
}

// etcdDialer returns a dialer that creates etcd connections inside the
// network namespace at path, or nil (dial from our own) when path is "".
func etcdDialer(path string) etcd.Dialer {
	if path == "" {
		return nil
	}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		return netns.Dial(ctx, path, "tcp", addr)
	}
}
