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
		summary:   "list live connections, their path (overlay, shm, unix, host-tcp) and why not faster; with --qps the verbs queue pairs, with --regions the verbs memory per container: conns [--qps|--regions] [--host H] [-o json]",
		run:       runConns,
		needsRoot: true,
	})
}

// connsTimeout bounds the question to each agent.
const connsTimeout = 5 * time.Second

func runConns(g *Global, args []string) error {
	fs := newFlags(g, "conns")
	host := fs.String("host", "", "only what this host's agent lists (default: every host)")
	format := fs.String("o", "table", "output format: table or json")
	qps := fs.Bool("qps", false, "list the verbs queue pairs instead: container, QPN, type, peer, path, state, bytes received")
	regions := fs.Bool("regions", false, "list per container what its verbs QPs and memory regions hold at its agent instead")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*format != "table" && *format != "json") || fs.NArg() > 0 || (*qps && *regions) {
		return fmt.Errorf("%w: freeflow conns [--qps|--regions] [--host H] [-o table|json]", errUsage)
	}
	c, err := g.Layout().LoadCluster()
	if err != nil {
		return err
	}
	hosts, err := connsHosts(c, *host)
	if err != nil {
		return err
	}
	switch {
	case *qps:
		return listFromHosts(g, hosts, *format, (*agentapi.AdminClient).QPs, printQPs)
	case *regions:
		return listFromHosts(g, hosts, *format, (*agentapi.AdminClient).VerbsMem, printVerbsMem)
	}
	return listFromHosts(g, hosts, *format, (*agentapi.AdminClient).Conns, printConns)
}

// listFromHosts asks every host's agent for its list with ask and prints
// them together, as a table with print or as JSON.
func listFromHosts[T any](g *Global, hosts []string, format string,
	ask func(*agentapi.AdminClient, context.Context) ([]T, error), print func(io.Writer, []T) error) error {
	all := []T{}
	for _, h := range hosts {
		list, err := hostList(g.Layout(), h, ask)
		if err != nil {
			return err
		}
		all = append(all, list...)
	}
	if format == "json" {
		enc := json.NewEncoder(g.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(all)
	}
	return print(g.Out, all)
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

// hostList asks host's agent for its list with ask.
func hostList[T any](l state.Layout, host string, ask func(*agentapi.AdminClient, context.Context) ([]T, error)) ([]T, error) {
	ctx, cancel := context.WithTimeout(context.Background(), connsTimeout)
	defer cancel()
	a, err := agentapi.DialAdmin(l.AdminSocket(host))
	if err != nil {
		return nil, fmt.Errorf("host %s: %w (is its agent running? see `freeflow status`)", host, err)
	}
	defer a.Close()
	list, err := ask(a, ctx)
	if err != nil {
		return nil, fmt.Errorf("host %s: %w", host, err)
	}
	return list, nil
}

func printConns(w io.Writer, cs []agentapi.ConnInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LOCAL\tREMOTE\tLOCAL-CONTAINER\tREMOTE-CONTAINER\tPATH\tREASON")
	for _, c := range cs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", c.Local, c.Remote, c.LocalContainer, dash(c.RemoteContainer), c.Path, dash(c.Reason))
	}
	return tw.Flush()
}

func printQPs(w io.Writer, qps []agentapi.QPInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTAINER\tQPN\tTYPE\tPEER-CONTAINER\tPEER-QPN\tPATH\tSTATE\tRX-BYTES")
	for _, q := range qps {
		peer := "-"
		if q.PeerQPN != 0 {
			peer = fmt.Sprintf("0x%06x", q.PeerQPN)
		}
		fmt.Fprintf(tw, "%s\t0x%06x\t%s\t%s\t%s\t%s\t%s\t%d\n", q.Container, q.QPN, q.Type, dash(q.PeerContainer), peer, q.Path, q.State, q.RxBytes)
	}
	return tw.Flush()
}

func printVerbsMem(w io.Writer, ms []agentapi.VerbsMemInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTAINER\tQPS\tREGIONS\tREGION-BYTES\tMEMFDS\tMEMFD-LIMIT")
	for _, m := range ms {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\n", m.Container, m.QPs, m.Regions, m.RegionBytes, m.Memfds, m.MemfdLimit)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
