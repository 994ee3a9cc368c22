package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/freeflow-net/freeflow/internal/etcdproc"
	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/state"
)

// etcdTimeout bounds how long `up` waits for etcd to be healthy.
const etcdTimeout = 15 * time.Second

// ManagedEtcdURL is the client URL of a cluster's managed etcd, on the
// fabric namespace's own address so every host reaches it over the fabric.
var ManagedEtcdURL = fmt.Sprintf("http://%s:%d", state.FabricEtcd, state.EtcdPort)

// startEtcd runs a single-node etcd inside the fabric namespace. Its peer
// port listens on 127.0.0.1 of that namespace only: there are no peers.
func startEtcd(l state.Layout) (pid int, logPath string, err error) {
	logPath = etcdLog(l)
	args := etcdproc.Args(etcdproc.Config{
		Name:      l.Cluster,
		DataDir:   l.EtcdDir(),
		ClientURL: ManagedEtcdURL,
		PeerURL:   "http://127.0.0.1:2380",
		Token:     "freeflow-" + l.Cluster,
	})
	pid, err = spawn(l.FabricNetNS(), logPath, nil, args[0], args[1:]...)
	return pid, logPath, err
}

// etcdLog is the log file of a managed etcd.
func etcdLog(l state.Layout) string { return filepath.Join(l.LogDir(), "etcd.log") }

var errExited = errors.New("process exited")

// waitEtcd waits until etcd at url is healthy as seen from inside network
// namespace ns (where its clients are; "" for the CLI's own namespace), the
// process pid (0: not ours) dies, or ctx ends; hint says where to look when
// it does not come up.
func waitEtcd(ctx context.Context, ns, url string, pid int, hint string) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if pid > 0 {
		go func() {
			for ctx.Err() == nil && alive(pid) {
				time.Sleep(100 * time.Millisecond)
			}
			cancel(errExited)
		}()
	}
	var dial etcdproc.Dialer
	if ns != "" {
		dial = func(ctx context.Context, addr string) (net.Conn, error) {
			return netns.Dial(ctx, netns.Path(ns), "tcp", addr)
		}
	}
	err := etcdproc.WaitHealthy(ctx, url, dial)
	if errors.Is(context.Cause(ctx), errExited) {
		return fmt.Errorf("etcd (pid %d) exited during start-up; %s", pid, hint)
	}
	if err != nil {
		return fmt.Errorf("%w; %s", err, hint)
	}
	return nil
}
