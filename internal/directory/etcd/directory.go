// Package etcd is the cluster directory kept in etcd v3 and cached by
// every agent through a watch (push, not poll).
//
// Key layout (values are JSON of internal/directory's records):
//
//	/freeflow/<cluster>/containers/<id>   directory.Container
//	/freeflow/<cluster>/hosts/<name>      directory.Host
package etcd

// Design note: why list + watch, and what happens when etcd is down.
//
// Every agent needs to answer "where is IP X" in microseconds, for every new
// connection, whether or not etcd answers right now. So reads never touch
// etcd: they come from an in-memory cache. The cache is kept current by
// push, not poll: one ranged Get of the cluster prefix at revision R gives a
// complete, consistent view, then one watch from R+1 streams every later
// put and delete in revision order. Nothing is missed between the two
// because the watch starts exactly where the list ended.
//
// clientv3 resumes a broken watch stream by itself (on another member when
// the one it used dies), so a member loss or an etcd restart on the same
// data costs nothing but the outage. When the watch cannot resume
// (compaction removed the revisions it needed, the member lost its leader,
// the revision went backwards because etcd's data was replaced), the loop
// starts over: list again, diff against the cache, watch again, retrying
// with backoff capped at one second.
//
// A silent watch looks the same whether nothing changed or etcd is gone, so
// a probe asks etcd for a progress notification on the watch stream twice a
// second; Health.Connected is true only while those answers arrive.
//
// While etcd is unreachable the cache keeps serving its last view (a stale
// answer beats none: fast paths fall back to the overlay anyway when a peer
// is wrong), Health says why it is not connected, and writes fail after a
// bounded timeout with an error that names the endpoints.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"sync"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// Dialer opens a connection to addr ("host:port"). The CLI passes one that
// dials from inside another network namespace.
type Dialer func(ctx context.Context, addr string) (net.Conn, error)

// Config says which etcd to use and for which cluster.
type Config struct {
	Cluster        string        // FreeFlow cluster name; keys live under Prefix(Cluster)
	Endpoints      []string      // etcd client URLs, e.g. http://10.99.0.2:2379
	DialTimeout    time.Duration // per connection attempt; default 2 s
	RequestTimeout time.Duration // bound on each write and on each list; default 3 s
	Dialer         Dialer        // optional; nil dials from the caller's namespace

	// Logf receives state changes and skipped records; default log.Printf.
	Logf func(format string, args ...any)
}

const (
	defaultDial    = 2 * time.Second
	defaultRequest = 3 * time.Second // outlasts a leader election (1-2 s)
	minBackoff     = 50 * time.Millisecond
	maxBackoff     = time.Second
	probeInterval  = 500 * time.Millisecond
	staleAfter     = 3 * probeInterval
)

// Directory is a cluster's container directory: writes go to etcd, reads
// come from a local cache that a watch keeps current.
type Directory struct {
	cfg    Config
	prefix string
	client *clientv3.Client
	cache  *cache
	subs   *subscribers
	health *healthState

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

// New returns a Directory for cfg.Cluster and starts keeping its cache in
// sync. It does not wait for etcd: the cache starts empty and fills as soon
// as etcd answers; Health tells whether it has. ctx only carries values:
// the Directory runs until Close.
func New(ctx context.Context, cfg Config) (*Directory, error) {
	cfg, err := withDefaults(cfg)
	if err != nil {
		return nil, err
	}
	ccfg := clientv3.Config{
		Endpoints:            cfg.Endpoints,
		DialTimeout:          cfg.DialTimeout,
		DialKeepAliveTime:    5 * time.Second, // etcd rejects pings more often than every 5 s
		DialKeepAliveTimeout: 2 * time.Second,
		Logger:               zap.NewNop(), // failures surface through Health and errors instead
	}
	if cfg.Dialer != nil {
		ccfg.DialOptions = []grpc.DialOption{grpc.WithContextDialer(cfg.Dialer)}
	}
	client, err := clientv3.New(ccfg)
	if err != nil {
		return nil, fmt.Errorf("directory: set up etcd client for %v: %w", cfg.Endpoints, err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d := &Directory{
		cfg:    cfg,
		prefix: Prefix(cfg.Cluster),
		client: client,
		cache:  newCache(),
		subs:   newSubscribers(),
		health: newHealthState(fmt.Sprintf("not yet connected to etcd at %v", cfg.Endpoints)),
		cancel: cancel,
		done:   make(chan struct{}),
	}
	go d.run(runCtx)
	return d, nil
}

func withDefaults(cfg Config) (Config, error) {
	if err := checkName("cluster name", cfg.Cluster); err != nil {
		return cfg, err
	}
	if len(cfg.Endpoints) == 0 {
		return cfg, errors.New("directory: no etcd endpoints given; pass at least one client URL such as http://127.0.0.1:2379")
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = defaultDial
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = defaultRequest
	}
	if cfg.Logf == nil {
		cfg.Logf = log.Printf
	}
	return cfg, nil
}

// Health reports whether the cache is live and, if not, why.
func (d *Directory) Health() directory.Health { return d.health.get() }

// Close stops the watch, closes every subscription and the etcd client.
// The cache stays readable.
func (d *Directory) Close() error {
	var err error
	d.closeOnce.Do(func() {
		d.cancel()
		<-d.done
		d.subs.closeAll()
		if cerr := d.client.Close(); cerr != nil && !errors.Is(cerr, context.Canceled) {
			err = fmt.Errorf("directory: close etcd client: %w", cerr)
		}
	})
	return err
}
