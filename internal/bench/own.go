package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/freeflow-net/freeflow/internal/state"
)

// benchCluster is the cluster a run measures; own says the bench brought
// it up and must take it down.
type benchCluster struct {
	cli   CLI
	state *state.Cluster
	own   bool
	log   func(format string, a ...any)
}

// benchHosts is how many hosts the bench's own cluster has.
const benchHosts = 2

// openCluster brings up the bench's own cluster (a unique name, so it never
// meets a user's cluster or a parallel run), or loads the one named.
func openCluster(ctx context.Context, o Options) (*benchCluster, error) {
	logf := func(format string, a ...any) { fmt.Fprintf(o.Log, "bench: "+format+"\n", a...) }
	c := &benchCluster{cli: CLI{Bin: o.Bin, Cluster: o.Cluster}, log: logf}
	if o.Cluster == "" {
		c.cli.Cluster, c.own = state.RandomName("bench", 3), true
		logf("bringing up cluster %s (%d hosts); if the bench is killed, remove it with `freeflow --cluster %s cluster down`",
			c.cli.Cluster, benchHosts, c.cli.Cluster)
		if err := c.cli.Up(ctx, benchHosts); err != nil {
			return nil, joinErr(fmt.Errorf("bring up bench cluster: %w", err), c.close())
		}
	}
	st, err := state.NewLayout(c.cli.Cluster).LoadCluster()
	if err == nil && st.Phase != state.PhaseUp {
		err = fmt.Errorf("cluster %s is %s, not up", c.cli.Cluster, st.Phase)
	}
	if err != nil {
		return nil, joinErr(err, c.close())
	}
	c.state = st
	return c, nil
}

// close takes the bench's own cluster down; a cluster it was given stays.
// It has its own deadline: it also runs after Ctrl-C ended the run's context.
func (c *benchCluster) close() error {
	if !c.own {
		return nil
	}
	c.log("taking down cluster %s", c.cli.Cluster)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.cli.Down(ctx); err != nil {
		return fmt.Errorf("take down bench cluster %s (retry `freeflow --cluster %s cluster down`): %w", c.cli.Cluster, c.cli.Cluster, err)
	}
	c.own = false
	return nil
}
