package cluster

import (
	"context"
	"fmt"
	"net"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/directory/etcd"
	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/state"
)

// putSettings stores the cluster's settings in etcd before the agents
// start, so each agent has them from its first read of the cluster data.
// It always writes, so a cluster on an external etcd does not inherit the
// settings of an earlier cluster of the same name.
func putSettings(ctx context.Context, l state.Layout, c *state.Cluster, s directory.Settings) error {
	var dial etcd.Dialer
	if c.Etcd.Managed { // reached from a host, as the agents reach it
		ns := netns.Path(l.HostNetNS(c.Hosts[0].Name))
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return netns.Dial(ctx, ns, "tcp", addr) }
	}
	d, err := etcd.New(ctx, etcd.Config{
		Cluster: l.Cluster, Endpoints: c.Etcd.Endpoints, Dialer: dial,
		Logf: func(string, ...any) {}, // a failed write is reported below
	})
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.PutSettings(ctx, s); err != nil {
		return fmt.Errorf("store the cluster settings: %w", err)
	}
	return nil
}
