package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/state"
)

func init() {
	register("conns", command{
		summary:   "list live connections, their path (overlay, shm, unix, host-tcp) and why not faster: conns [--host H] [-o json]",
		run:       runConns,
		needsRoot: true,
	})
}

// connsTimeout bounds the question to each agent.
const connsTimeout = 5 * time.Second

func runConns(g *Global, args []string) error {
	fs := newFlags(g, "conns")
	host := fs.String("host", "", "only this host's connections (default: every host)")
	format := fs.String("o", "table", "output format: table or json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*format != "table" && *format != "json") || fs.NArg() > 0 {
		return fmt.Errorf("%w: freeflow conns [--host H] [-o table|json]", errUsage)
	}
	c, err := g.Layout().LoadCluster()
	if err != nil {
		return err
	}
	hosts, err := connsHosts(c, *host)
	if err != nil {
		return err
	}
	all := []agentapi.ConnInfo{}
	for _, h := range hosts {
		cs, err := hostConns(g.Layout(), h)
		if err != nil {
			return err
		}
		all = append(all, cs...)
	}
	if *format == "json" {
		enc := json.NewEncoder(g.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(all)
	}
	return printConns(g.Out, all)
}

// connsHosts returns the hosts to ask: one if named, else all.
func connsHosts(c *state.Cluster, only string) ([]string, error) {
	if only != "" {
		if _, err := c.Host(only); err != nil {
			return nil, err
		}
		return []string{only}, nil
	}
	var names []string
	for _, h := range c.Hosts {
		names = append(names, h.Name)
	}
	return names, nil
}

func hostConns(l state.Layout, host string) ([]agentapi.ConnInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), connsTimeout)
	defer cancel()
	a, err := agentapi.DialAdmin(l.AdminSocket(host))
	if err != nil {
		return nil, fmt.Errorf("host %s: %w (is its agent running? see `freeflow status`)", host, err)
	}
	defer a.Close()
	cs, err := a.Conns(ctx)
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", host, err)
	}
	return cs, nil
}

func printConns(w io.Writer, cs []agentapi.ConnInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LOCAL\tREMOTE\tLOCAL-CONTAINER\tREMOTE-CONTAINER\tPATH\tREASON")
	for _, c := range cs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Local, c.Remote, c.LocalContainer, dash(c.RemoteContainer), c.Path, dash(c.Reason))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
