// Package agent is freeflowd: the per-host agent that registers the host's
// containers in the cluster directory and answers their questions over the
// protocol of docs/PROTOCOL.md.
//
// Design note.
//
// Who is calling comes from the kernel, never from the message. A process
// inside container A can put anything into a message, including B's id or
// IP, so nothing it sends is trusted to say who it is. What it cannot forge
// is the network namespace it runs in: SO_PEERCRED gives the pid that
// connected, /proc/<pid>/ns/net names that pid's network namespace (a
// device+inode pair), and the agent keeps a map from the namespace of every
// registered local container (stat of its NetNS path, taken when it is
// registered or found in the directory) to that container. HELLO_REPLY
// therefore always names the caller's own container, and a caller in no
// registered namespace is DENIED. The pid is read once, when the connection
// is accepted; a registered namespace is kept alive by its bind mount, so
// its inode cannot be reused by another namespace while it is registered.
// The admin socket (CNI plugin, CLI) is mode 0600 and, in addition,
// refuses callers that are not uid 0 or that sit inside a registered
// container's namespace, so a root process in a container that somehow
// reached it still cannot register or remove containers.
//
// Malformed input costs the sender only its own connection. Every
// connection has its own goroutine, at most one request outstanding, a
// read deadline (a client that sends nothing is dropped) and a write
// deadline (a client that does not read its replies is dropped). The codec
// rejects every malformed datagram with the wire code the spec gives; the
// agent replies ERROR with that code and, for BADMSG, VERSION and SEQUENCE,
// closes the connection. A panic in a handler is recovered, logged once and
// ends only that connection. Nothing a client sends reaches the directory
// except through REGISTER and UNREGISTER on the admin socket. What a
// caller's connections and requests can make the agent hold is counted
// against the caller's container (limits.go).
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/policy"
)

// Defaults for the Config fields left zero.
const (
	DefaultHelloTimeout = 10 * time.Second
	DefaultIdleTimeout  = 5 * time.Minute
	DefaultWriteTimeout = 5 * time.Second
	directoryTimeout    = 5 * time.Second
)

// Config describes one agent.
type Config struct {
	Cluster     string
	Host        string
	FabricIP    string
	Subnet      string // this host's container subnet (CIDR)
	SockDir     string // library socket directory; the socket is SockDir/agent.sock, mode 0666
	AdminSocket string // admin socket path, mode 0600
	BrokerPort  int    // TCP port for cross-host offers on FabricIP; the same on every host (default 7947)
	// FabricGuard installs the fabric guard rules (guard.go) in the agent's
	// network namespace at start, as freeflowd does by default, and hands
	// no fabric socket to a process that could clear its mark. The unit
	// tests run agents in the root namespace and leave it false or replace
	// installGuard, so they install nothing there.
	FabricGuard bool

	HelloTimeout time.Duration // a new connection must say HELLO within this
	IdleTimeout  time.Duration // a connection silent this long is closed
	WriteTimeout time.Duration // a reply not taken within this closes the connection
	// SessionsPerContainer bounds one container's connections to the
	// library socket; AdminConns the admin socket's (limits.go).
	SessionsPerContainer int
	AdminConns           int
	Logger               *slog.Logger

	keepDecided  time.Duration // how long decisions and parked halves are kept; tests shorten it
	commitWait   time.Duration // how long a fast PATH on an offer waits for its COMMIT; tests shorten it
	installGuard func() error  // installs the fabric guard (installFabricGuard); tests make it fail
	verbsQPs     int           // QPs per container (DefaultVerbsQPs); tests lower it
	verbsMRs     int           // memory regions per container (DefaultVerbsMRs); tests lower it
	verbsFDs     int           // memfds the verbs registry holds per container (DefaultVerbsFDs); tests lower it
}

// LibrarySocket is the path of the library socket.
func (c Config) LibrarySocket() string { return filepath.Join(c.SockDir, "agent.sock") }

// Directory is what the agent needs of the cluster directory; the
// etcd-backed *etcd.Directory (internal/directory/etcd) and the Kubernetes
// API-backed *kube.Directory (internal/directory/kube) satisfy it.
type Directory interface {
	// PutContainer stores c and returns the record as every agent will
	// read it back: a datastore may fill in what it owns (the Kubernetes
	// one takes the tenant from the pod).
	PutContainer(ctx context.Context, c directory.Container) (directory.Container, error)
	DeleteContainer(ctx context.Context, id string) error
	PutHost(ctx context.Context, h directory.Host) error
	LookupIP(ip string) (directory.Container, bool)
	Containers() []directory.Container
	Hosts() []directory.Host
	Health() directory.Health
	// ClusterKey returns the cluster's broker key, creating it on first use.
	ClusterKey(ctx context.Context) ([]byte, error)
	// Policy returns the fast-path policy document (nil: the default).
	Policy(ctx context.Context) ([]byte, error)
	// Settings returns the cluster settings document (nil: the default).
	Settings(ctx context.Context) ([]byte, error)
}

// Agent serves one host.
type Agent struct {
	cfg     Config
	subnet  netip.Prefix
	dir     Directory
	log     *slog.Logger
	started time.Time
	selfNS  nsKey // the agent's own network namespace (the host's)
	ids     *identities

	lib, admin *net.UnixListener // set by Listen
	broker     net.Listener      // cross-host offers; nil if it could not listen
	brokerErr  string            // why broker is nil
	guardErr   string            // why the fabric guard is not installed; set: no fabric socket is handed
	markNS     nsKey             // the user namespace owning the host's network namespace (mayClearMark)

	rv        *rendezvous    // connection brokering: one meeting per tuple
	listeners *listeners     // library-enabled listeners of local containers
	live      *connTable     // answered connections and counters
	shm       *shmBudget     // what each container's shm channels are charged
	ledgers   *ledgers       // the linked connections of each process (ledger.go)
	watch     *watchers      // the libraries' parking threads (park.go)
	xlinks    *xlinks        // cross-host links granted to local connecting processes (crosshost_link.go)
	nonces    *nonces        // of recent offers, against replays
	pool      *offerPool     // connections to peer agents, ready for offers (crosshost_pool.go)
	standbys  *standbys      // pooled connections of peer agents waiting here
	diag      *diagSockets   // reads local containers' accept queues (acceptq.go)
	verbs     *verbsRegistry // QPs and regions of the verbs device (verbs.go)
	key       atomic.Pointer[[]byte]
	pol       atomic.Pointer[policy.Policy]
	set       atomic.Pointer[directory.Settings] // nil until first read

	// What callers hold, per container (limits.go).
	sessions, admins           *quota
	refusals, strangerRefusals *quota
	files                      atomic.Uint64 // RLIMIT_NOFILE when short of fileLimit; 0: not short
	fills                      *quota        // LINK_FILLs in flight (crosshost_link.go)
	queued                     *quota        // connectors waiting for a slow acceptor (acceptq.go)

	mu    sync.Mutex               // guards conns, held, parkedFor and closing
	conns map[*net.UnixConn]string // every connection served; a library session's: its container
	// held: containers being migrated (RELEASE), whose sessions are
	// closed and refused until the time given.
	held map[string]time.Time
	// parkedFor: containers whose connections PARK_CONTAINER parked, not
	// resumed until the time given or their RELEASE (resume.go).
	parkedFor map[string]time.Time
	closing   bool
	wg        sync.WaitGroup
}

// New checks cfg and returns an agent that is not yet listening.
func New(cfg Config, dir Directory) (*Agent, error) {
	cfg = withDefaults(cfg)
	if cfg.Cluster == "" || cfg.Host == "" {
		return nil, errors.New("agent: cluster and host names are required")
	}
	if cfg.SockDir == "" || cfg.AdminSocket == "" {
		return nil, errors.New("agent: both the library socket directory and the admin socket path are required")
	}
	subnet, err := netip.ParsePrefix(cfg.Subnet)
	if err != nil {
		return nil, fmt.Errorf("agent: container subnet %q is not a CIDR such as 10.244.1.0/24: %w", cfg.Subnet, err)
	}
	self, err := nsOfPath("/proc/self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("agent: read own network namespace: %w", err)
	}
	ledgers := newLedgers()
	a := &Agent{
		cfg: cfg, subnet: subnet.Masked(), dir: dir, log: cfg.Logger, selfNS: self,
		ids: newIdentities(), conns: map[*net.UnixConn]string{}, held: map[string]time.Time{}, parkedFor: map[string]time.Time{},
		rv: newRendezvous(cfg.keepDecided), listeners: newListeners(), live: newConnTable(), nonces: newNonces(),
		shm: newShmBudget(), ledgers: ledgers, watch: newWatchers(), standbys: newStandbys(), xlinks: newXLinks(),
		sessions: newQuota(cfg.SessionsPerContainer), admins: newQuota(cfg.AdminConns),
		refusals: newQuota(refusalsPerContainer), strangerRefusals: newQuota(refusalsStrangers),
		fills: newQuota(fillsPerContainer), queued: newQuota(queuedPerContainer), diag: newDiagSockets(),
	}
	a.verbs = newVerbsRegistry(cfg.verbsQPs, cfg.verbsMRs, func() int { return a.share().verbsFDs })
	a.pool = newOfferPool(a)
	return a, nil
}

func withDefaults(cfg Config) Config {
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = DefaultHelloTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.BrokerPort <= 0 {
		cfg.BrokerPort = DefaultBrokerPort
	}
	if cfg.SessionsPerContainer <= 0 {
		cfg.SessionsPerContainer = DefaultSessionsPerContainer
	}
	if cfg.AdminConns <= 0 {
		cfg.AdminConns = DefaultAdminConns
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.keepDecided <= 0 {
		cfg.keepDecided = keepDecided
	}
	if cfg.commitWait <= 0 {
		cfg.commitWait = commitWait
	}
	if cfg.verbsQPs <= 0 {
		cfg.verbsQPs = DefaultVerbsQPs
	}
	if cfg.verbsMRs <= 0 {
		cfg.verbsMRs = DefaultVerbsMRs
	}
	if cfg.verbsFDs <= 0 {
		cfg.verbsFDs = DefaultVerbsFDs
	}
	if cfg.installGuard == nil {
		cfg.installGuard = installFabricGuard
	}
	return cfg
}

// Run listens, serves until ctx is done, then closes every connection and
// removes its sockets.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.Listen(); err != nil {
		return err
	}
	return a.Serve(ctx)
}

// Serve registers the host, rebuilds the local identity map from the
// directory, and serves the sockets opened by Listen until ctx is done.
func (a *Agent) Serve(ctx context.Context) error {
	a.started = time.Now()
	a.guardFabric() // before any goroutine that could hand a fabric socket
	a.refreshIdentities()
	a.wg.Add(1)
	go a.registerHost(ctx)
	if a.lib == nil || a.admin == nil {
		return errors.New("agent: Serve called before Listen")
	}
	a.wg.Add(1)
	go a.keepClusterData(ctx)
	if a.broker != nil {
		a.wg.Add(1)
		go a.brokerLoop(ctx, a.broker)
	}
	a.wg.Add(1)
	go a.pool.run(ctx)
	a.wg.Add(1)
	go a.resumeLoop(ctx) // socket pairs back onto shm (resume.go)
	a.wg.Add(2)
	go a.acceptLoop(ctx, a.lib, false)
	go a.acceptLoop(ctx, a.admin, true)
	a.log.Info("agent serving", "cluster", a.cfg.Cluster, "host", a.cfg.Host,
		"library_socket", a.cfg.LibrarySocket(), "admin_socket", a.cfg.AdminSocket)
	<-ctx.Done()
	a.shutdown()
	return nil
}

// registerHost writes the Host record, retrying while the directory is
// unreachable: the agent serves from its cache meanwhile.
func (a *Agent) registerHost(ctx context.Context) {
	defer a.wg.Done()
	h := directory.Host{Name: a.cfg.Host, FabricIP: a.cfg.FabricIP, Subnet: a.subnet.String()}
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		wctx, cancel := context.WithTimeout(ctx, directoryTimeout)
		err := a.dir.PutHost(wctx, h)
		cancel()
		if err == nil {
			return
		}
		a.log.Warn("register host in directory; retrying", "host", h.Name, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}
